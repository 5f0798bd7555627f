package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// smBooked is the SM % booked on the test inventory's first GPU.
func smBooked(c *Core) int { return c.Usage()[0].SMAllocated }

func hasStart(effs []string, fn string) bool {
	return slices.ContainsFunc(effs, func(s string) bool { return strings.HasPrefix(s, "start openfaas-fn/"+fn) })
}

// Where demotes are confirmed (Kubernetes: a pod leaves routing only once
// the writer has labelled it), a demoted replica keeps its SM share booked
// until ReplicaDemoted, so nothing is placed on a share its pod may still
// use. Each case demotes a-1 (60 % SM, 2 GiB) on a one-GPU inventory,
// then does more; want is the SM % booked at the end and whether b (60 %
// SM) was started by the last step.
func TestConfirmedDemotesHoldTheSMShare(t *testing.T) {
	scale := func(n int) func(*testing.T, *Core) []string {
		return func(t *testing.T, c *Core) []string {
			res, _, err := c.Scale("openfaas-fn", "a", n, t0.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return kinds(res)
		}
	}
	deployB := func(t *testing.T, c *Core) []string {
		res, err := c.Deploy(fn("b", 60, 2, 1, 1), t0.Add(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return kinds(res)
	}
	confirm := func(t *testing.T, c *Core) []string { return kinds(c.ReplicaDemoted("a-1", t0.Add(3*time.Second))) }
	abort := func(t *testing.T, c *Core) []string { c.Abort(); return nil }
	addNode := func(t *testing.T, c *Core) []string {
		inv := inventory(2, 1)
		return kinds(c.SetInventory(inv, t0.Add(4*time.Second)))
	}
	type step func(*testing.T, *Core) []string
	tests := []struct {
		name   string
		steps  []step
		sm     int
		bStart bool
		phase  Phase
	}{
		{"not confirmed: the share stays booked and b waits", []step{deployB}, 60, false, Warm},
		{"confirmed: the share is freed and b, waiting, is placed", []step{deployB, confirm}, 60, true, Warm},
		{"confirmed before b: b is placed at once", []step{confirm, deployB}, 60, true, Warm},
		{"promoted before the confirmation: booked once, not twice", []step{scale(1)}, 60, false, Ready},
		{"a late confirmation of a promoted replica changes nothing", []step{scale(1), confirm, deployB}, 60, false, Ready},
		{"a promote undone leaves it unconfirmed, its share booked", []step{scale(1), abort, deployB}, 60, false, Warm},
		{"a promote of a confirmed replica undone frees the share again", []step{confirm, scale(1), abort, deployB}, 60, true, Warm},
		{"the inventory rebooked: still booked until confirmed", []step{addNode}, 60, false, Warm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{ConfirmStops: true, ConfirmDemotes: true})
			if _, err := c.Deploy(fn("a", 60, 2, 0, 2), t0); err != nil {
				t.Fatal(err)
			}
			res, _, err := c.Scale("openfaas-fn", "a", 0, t0)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := kinds(res), []string{"write openfaas-fn/a", "demote openfaas-fn/a a-1"}; !slices.Equal(got, want) {
				t.Fatalf("scale down: %q, want %q", got, want)
			}
			var last []string
			for _, s := range tt.steps {
				last = s(t, c)
			}
			if got := smBooked(c); got != tt.sm {
				t.Errorf("SM booked on the GPU = %d %%, want %d %%", got, tt.sm)
			}
			if got := hasStart(last, "b"); got != tt.bStart {
				t.Errorf("last step's effects %q: b started %v, want %v", last, got, tt.bStart)
			}
			if v, ok := c.Replica("a-1"); !ok || v.Phase != tt.phase {
				t.Errorf("a-1 is %+v (known %v), want %s", v.Phase, ok, tt.phase)
			}
		})
	}
}

// A warm replica whose demote is not confirmed yet is not evictable: its
// pod still serves on its share. Once confirmed, a placement that needs
// its memory evicts it as any warm replica.
func TestUnconfirmedDemoteIsNotEvicted(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{ConfirmStops: true, ConfirmDemotes: true})
	if _, err := c.Deploy(fn("old", 50, 12, 0, 1), t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Scale("openfaas-fn", "old", 0, t0); err != nil {
		t.Fatal(err)
	}
	res, err := c.Deploy(fn("new", 50, 12, 1, 1), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(res); slices.Contains(got, "stop openfaas-fn/old old-1") || hasStart(got, "new") {
		t.Fatalf("effects %q: the unconfirmed warm replica was evicted or new placed over it", got)
	}
	got := kinds(c.ReplicaDemoted("old-1", t0.Add(2*time.Second)))
	if !slices.Contains(got, "stop openfaas-fn/old old-1") || hasStart(got, "new") {
		t.Fatalf("confirmed: %q, want old-1 evicted (draining) and new waiting for it", got)
	}
	if got := kinds(c.ReplicaGone("old-1", t0.Add(3*time.Second))); !hasStart(got, "new") {
		t.Fatalf("once gone: %q, want new started", got)
	}
}

// A restart finds warm replicas already out of routing (their pods carry
// the label): restored warm, they hold no SM share with no confirmation.
func TestRestoredWarmReplicasAreConfirmed(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{})
	if _, err := c.Deploy(fn("a", 60, 2, 0, 1), t0); err != nil {
		t.Fatal(err)
	}
	res, _, err := c.Scale("openfaas-fn", "a", 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	rec := *res.Effects[0].Record
	c2 := New(inventory(1, 1), nil, Options{ConfirmStops: true, ConfirmDemotes: true})
	c2.Restore([]Record{rec}, t0.Add(time.Hour))
	if got := smBooked(c2); got != 0 {
		t.Fatalf("restored warm replica books %d %% SM, want 0", got)
	}
}
