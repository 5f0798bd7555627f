package lifecycle

import (
	"errors"
	"io/fs"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// A replica restored as draining holds its share, so nothing is placed on
// it, until ReplicaGone; then what waited is placed there.
func TestRestoreDrainingHoldsUntilGone(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{ConfirmStops: true})
	p := scheduler.Placement{Node: "n0", GPUs: []string{"GPU-0-0"}, Slice: gpu.Slice{SMPercent: 80, MemoryBytes: 2 << 30}}
	cfg := scheduler.SliceConfig{SMPercent: 80, Batch: 1}
	if err := c.RestoreDraining("old-1", "openfaas-fn/gone", p, cfg); err != nil {
		t.Fatal(err)
	}
	if v, ok := c.Replica("old-1"); !ok || v.Phase != Draining || v.Placement == nil {
		t.Fatalf("restored draining replica: %+v %v", v, ok)
	}
	tests := []struct {
		name string
		id   string
		ok   func(error) bool
	}{
		{"the same ID twice", "old-1", func(err error) bool { return errors.Is(err, fs.ErrExist) }},
		{"no room left", "old-2", func(err error) bool { return err != nil }},
	}
	for _, tt := range tests {
		if err := c.RestoreDraining(tt.id, "openfaas-fn/gone", p, cfg); !tt.ok(err) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if _, ok := c.Replica("old-2"); ok {
		t.Error("a draining replica that did not fit is known")
	}
	res, err := c.Deploy(fn("a", 60, 2, 1, 1), t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(res), []string{"write openfaas-fn/a"}; !slices.Equal(got, want) {
		t.Fatalf("deploy beside a draining replica: %q, want %q", got, want)
	}
	res = c.ReplicaGone("old-1", t0.Add(time.Second))
	if got, want := kinds(res), []string{"start openfaas-fn/a a-1", "write openfaas-fn/a"}; !slices.Equal(got, want) {
		t.Fatalf("once the draining replica is gone: %q, want %q", got, want)
	}
	if _, ok := c.Replica("old-1"); ok {
		t.Fatal("a gone draining replica is still known")
	}
}

// A node that comes back with replicas still running on it (its pods
// outlived its loss) has their shares booked before pending replicas are
// placed, so none is placed on a share still in use.
func TestSetInventoryHoldingBooksBeforePlacing(t *testing.T) {
	two := inventory(2, 1)
	one := gpu.Inventory{Source: "test", Nodes: two.Nodes[:1]}
	back := scheduler.Placement{Node: "n1", GPUs: []string{"GPU-1-0"}, Slice: gpu.Slice{SMPercent: 60, MemoryBytes: 2 << 30}}
	cfg := scheduler.SliceConfig{SMPercent: 60, Batch: 1}
	tests := []struct {
		name   string
		held   []Held
		booked []string
		want   []string // effects of the inventory change
	}{
		{"nothing held: the pending replica goes to the node back", nil, nil,
			[]string{"start openfaas-fn/a a-2", "write openfaas-fn/a"}},
		{"the node's share still held: the pending replica waits", []Held{{ID: "stray-1", Function: "openfaas-fn/a", Placement: back, Config: cfg}}, []string{"stray-1"},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(one, nil, Options{ConfirmStops: true})
			if _, err := c.Deploy(fn("a", 60, 2, 2, 2), t0); err != nil { // one placed, one pending
				t.Fatal(err)
			}
			res, booked := c.SetInventoryHolding(two, tt.held, t0.Add(time.Second))
			if got := kinds(res); !slices.Equal(got, tt.want) || !slices.Equal(booked, tt.booked) {
				t.Fatalf("effects %q, booked %q; want %q, %q", got, booked, tt.want, tt.booked)
			}
		})
	}
}

// A new node changes no booking on the GPUs that were there: the core
// books every replica afresh (rebook), each as the allocator held it. A
// warm replica holds its memory and no SM share, whether it is still warm
// or stopped and draining (a warm replica yielded, its function deleted):
// booked again with its SM share, it took the room of replicas in service
// beside it, which were then stopped as if gone with their node while
// their pods ran on (test/k8s TestNodeLossReplacesReplicas: two
// Deployments of one function on one GPU, 200 % SM). A restart from the
// records (Restore) books the warm replicas back the same way.
func TestRebookingKeepsEveryBooking(t *testing.T) {
	key := func(name string) string { return Key("openfaas-fn", name) }
	// warmOf deploys w (its slice sm %, 8 GiB) and scales it to zero, its
	// demote confirmed: warm, its memory booked and no SM share.
	warmOf := func(t *testing.T, c *Core, sm int, now time.Time) {
		t.Helper()
		if _, err := c.Deploy(fn("w", sm, 8, 0, 1), now); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Scale("openfaas-fn", "w", 0, now); err != nil {
			t.Fatal(err)
		}
		v, _ := c.Function(key("w"))
		if len(v.Warm) != 1 {
			t.Fatalf("w not warm: %+v", v)
		}
		c.ReplicaDemoted(v.Warm[0].ID, now)
	}
	tests := []struct {
		name  string
		setUp func(t *testing.T, c *Core)
		// restart: the records hold every booking (none draining), so a
		// restart from them books the same.
		restart bool
	}{
		{"a warm replica, older than the replicas in service beside it", func(t *testing.T, c *Core) {
			warmOf(t, c, 100, t0)
			if _, err := c.Deploy(fn("m", 50, 4, 2, 2), t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a warm replica, newer than the replicas in service that fill its GPU's SMs", func(t *testing.T, c *Core) {
			if _, err := c.Deploy(fn("m", 50, 4, 1, 2), t0); err != nil {
				t.Fatal(err)
			}
			warmOf(t, c, 50, t0.Add(time.Second))
			if _, _, err := c.Scale("openfaas-fn", "m", 2, t0.Add(2*time.Second)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a warm replica stopped, draining (its function deleted)", func(t *testing.T, c *Core) {
			warmOf(t, c, 100, t0)
			if _, err := c.Delete("openfaas-fn", "w", t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			if v, ok := c.Replica("w-1"); !ok || v.Phase != Draining {
				t.Fatalf("w's replica not draining: %+v", v)
			}
			if _, err := c.Deploy(fn("m", 50, 4, 2, 2), t0.Add(2*time.Second)); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{ConfirmStops: true, ConfirmDemotes: true})
			tt.setUp(t, c)
			v, _ := c.Function(key("m"))
			if len(v.Live) != 2 || v.Live[0].Placement == nil || v.Live[1].Placement == nil {
				t.Fatalf("m's replicas not both placed beside the warm one: %+v", v.Live)
			}
			before := c.Usage()
			res := c.SetInventory(inventory(2, 1), t0.Add(time.Minute))
			for _, e := range res.Effects {
				if e.Kind == Stop || e.Kind == Start {
					t.Errorf("a node added: %s %s (%s)", e.Kind, e.Replica.ID, e.Why)
				}
			}
			sameBookings(t, "a node added", before, c.Usage())
			if !tt.restart {
				return
			}
			var recs []Record
			for _, f := range c.order {
				recs = append(recs, *f.record())
			}
			c2 := New(inventory(2, 1), nil, Options{ConfirmStops: true, ConfirmDemotes: true})
			if _, notes := c2.Restore(recs, t0.Add(2*time.Minute)); len(notes) != 0 {
				t.Errorf("a restart: %+v", notes)
			}
			sameBookings(t, "a restart", before, c2.Usage())
		})
	}
}

// sameBookings reports each GPU of before whose bookings differ in after.
func sameBookings(t *testing.T, after string, before, now []scheduler.GPUUsage) {
	t.Helper()
	for _, b := range before {
		i := slices.IndexFunc(now, func(u scheduler.GPUUsage) bool { return u.Device.UUID == b.Device.UUID })
		if i < 0 {
			t.Errorf("%s: GPU %s gone", after, b.Device.UUID)
			continue
		}
		a := now[i]
		if a.SMAllocated != b.SMAllocated || a.MemoryAllocated != b.MemoryAllocated || !maps.Equal(a.Replicas, b.Replicas) {
			t.Errorf("GPU %s: %d%% SM, %d GiB, %v before; %d%%, %d GiB, %v after %s",
				b.Device.UUID, b.SMAllocated, b.MemoryAllocated>>30, b.Replicas, a.SMAllocated, a.MemoryAllocated>>30, a.Replicas, after)
		}
	}
}
