package lifecycle

import (
	"errors"
	"io/fs"
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
