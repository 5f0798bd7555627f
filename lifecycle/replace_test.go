package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// has reports whether res holds an effect of kind for replica id.
func has(res Result, kind Kind, id string) bool {
	return slices.ContainsFunc(res.Effects, func(e Effect) bool { return e.Kind == kind && e.Replica.ID == id })
}

func liveIDs(c *Core, key string) []string {
	var out []string
	for _, r := range c.functions[key].live {
		out = append(out, r.id)
	}
	return out
}

// TestReplaceMakeBeforeBreak: a replacement serves before the replica it
// replaces leaves, and whatever happens to the replacement first, the old
// replica is never left out without one.
func TestReplaceMakeBeforeBreak(t *testing.T) {
	const key = "openfaas-fn/a"
	smaller := scheduler.SliceConfig{SMPercent: 10, Batch: 1}
	tests := []struct {
		name string
		cfg  scheduler.SliceConfig
		// then runs after the replacement was added and placed (it is
		// Starting, unless it did not fit); it returns the replicas in
		// service it expects at the end.
		then func(t *testing.T, c *Core, old, repl string) []string
	}{
		{
			name: "ready: the old one leaves routing then, and is stopped at the next tick",
			cfg:  smaller,
			then: func(t *testing.T, c *Core, old, repl string) []string {
				res := c.ReplicaReady(repl, t0.Add(2*time.Second))
				if !has(res, Demote, old) {
					t.Errorf("ready: effects %v, want the old replica demoted", kinds(res))
				}
				res = c.Tick(t0.Add(3 * time.Second))
				if !has(res, Stop, old) {
					t.Errorf("next tick: effects %v, want the replaced replica stopped", kinds(res))
				}
				return []string{repl}
			},
		},
		{
			name: "lost before ready: the old one stays, and no substitute is added",
			cfg:  smaller,
			then: func(t *testing.T, c *Core, old, repl string) []string {
				res := c.ReplicaGone(repl, t0.Add(2*time.Second))
				if has(res, Demote, old) || has(res, Stop, old) {
					t.Errorf("effects %v: the old replica must stay", kinds(res))
				}
				return []string{old}
			},
		},
		{
			name: "the old one lost meanwhile: the replacement takes over, nothing else is added",
			cfg:  smaller,
			then: func(t *testing.T, c *Core, old, repl string) []string {
				c.ReplicaGone(old, t0.Add(2*time.Second))
				if res := c.ReplicaReady(repl, t0.Add(3*time.Second)); len(res.Effects) > 1 {
					t.Errorf("ready: effects %v, want at most a write", kinds(res))
				}
				return []string{repl}
			},
		},
		{
			name: "scaled away before ready: the old one stays",
			cfg:  smaller,
			then: func(t *testing.T, c *Core, old, repl string) []string {
				if _, _, err := c.Scale("openfaas-fn", "a", 1, t0.Add(2*time.Second)); err != nil {
					t.Fatal(err)
				}
				if res := c.ReplicaReady(repl, t0.Add(3*time.Second)); has(res, Demote, old) {
					t.Errorf("the old replica retired by a replacement scaled away")
				}
				return []string{old}
			},
		},
		{
			name: "no room for it: it is dropped at the next tick and the old one stays",
			cfg:  scheduler.SliceConfig{SMPercent: 100, Batch: 1},
			then: func(t *testing.T, c *Core, old, repl string) []string {
				c.Tick(t0.Add(2 * time.Second))
				if _, ok := c.replicas[repl]; ok {
					t.Errorf("replacement %s still known after a tick without room", repl)
				}
				return []string{old}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{})
			if _, err := c.Deploy(fn("a", 30, 2, 1, 5), t0); err != nil {
				t.Fatal(err)
			}
			f := c.functions[key]
			old := f.live[0]
			c.ReplicaReady(old.id, t0)
			c.begin()
			var res Result
			repl := c.replace(f, old, tt.cfg, t0.Add(time.Second), "test", &res)
			c.placeAll(t0.Add(time.Second), &res)
			if has(res, Demote, old.id) || has(res, Stop, old.id) {
				t.Fatalf("replace: effects %v retire the old replica before its replacement is ready", kinds(res))
			}
			if tt.cfg == smaller && !has(res, Start, repl.id) {
				t.Fatalf("replace: effects %v, want the replacement started", kinds(res))
			}
			// The pair counts once, as the replacement, for the autoscaler.
			if got := replacedIDs(f); !got[old.id] || len(got) != 1 {
				t.Errorf("replaced while on its way: %v, want only %s", got, old.id)
			}
			want := tt.then(t, c, old.id, repl.id)
			if got := liveIDs(c, key); !slices.Equal(got, want) {
				t.Errorf("in service %v, want %v", got, want)
			}
			if got := replacedIDs(f); len(got) != 0 {
				t.Errorf("still replacing %v at the end", got)
			}
		})
	}
}

// TestMergeRetiresEveryReplaced: one replica replacing two retires both
// when ready.
func TestMergeRetiresEveryReplaced(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{NoWarm: true})
	if _, err := c.Deploy(fn("a", 20, 1, 2, 5), t0); err != nil {
		t.Fatal(err)
	}
	f := c.functions["openfaas-fn/a"]
	a, b := f.live[0], f.live[1]
	c.ReplicaReady(a.id, t0)
	c.ReplicaReady(b.id, t0)
	c.begin()
	var res Result
	m := c.merge(f, []*replica{a, b}, scheduler.SliceConfig{SMPercent: 30, Batch: 1}, t0.Add(time.Second), "merge", &res)
	c.placeAll(t0.Add(time.Second), &res)
	res = c.ReplicaReady(m.id, t0.Add(2*time.Second))
	for _, id := range []string{a.id, b.id} {
		if !has(res, Stop, id) { // NoWarm: retiring stops
			t.Errorf("effects %v: want %s stopped", kinds(res), id)
		}
	}
	for _, e := range res.Effects {
		if e.Kind == Stop && !strings.HasPrefix(e.Why, "replaced by "+m.id) {
			t.Errorf("stop of %s says %q", e.Replica.ID, e.Why)
		}
	}
	if got := liveIDs(c, "openfaas-fn/a"); !slices.Equal(got, []string{m.id}) {
		t.Errorf("in service %v, want %v", got, []string{m.id})
	}
	// The count the API reports follows: two became one. It stayed 2, and
	// on Kubernetes TestResizeMakeBeforeBreakOnKubernetes waited for a
	// status of 1 replica that never came.
	if v, _ := c.Function("openfaas-fn/a"); v.Desired != 1 {
		t.Errorf("desired %d after a merge of two into one, want 1", v.Desired)
	}
}

// TestReplacementAndReplacedLostTogether: a node lost with a replica and
// its replacement on it leaves one successor, whichever is counted first;
// losing only the replacement leaves the old one alone.
func TestReplacementAndReplacedLostTogether(t *testing.T) {
	for _, lose := range []string{"both", "replacement"} {
		t.Run(lose, func(t *testing.T) {
			c := New(inventory(2, 1), nil, Options{})
			if _, err := c.Deploy(fn("a", 30, 2, 1, 5), t0); err != nil {
				t.Fatal(err)
			}
			f := c.functions["openfaas-fn/a"]
			old := f.live[0]
			c.ReplicaReady(old.id, t0)
			c.begin()
			var res Result
			repl := c.replace(f, old, scheduler.SliceConfig{SMPercent: 10, Batch: 1}, t0.Add(time.Second), "test", &res)
			c.placeAll(t0.Add(time.Second), &res)
			if repl.placement == nil || old.placement == nil {
				t.Fatal("not placed")
			}
			gone := repl.placement.Node
			if lose == "both" && old.placement.Node != gone {
				t.Fatalf("best fit put the replacement on %s, the old one on %s", gone, old.placement.Node)
			}
			if lose == "replacement" {
				c.ReplicaGone(repl.id, t0.Add(2*time.Second))
			} else {
				inv := inventory(2, 1)
				inv.Nodes = slices.DeleteFunc(inv.Nodes, func(n gpu.Node) bool { return n.Name == gone })
				c.SetInventory(inv, t0.Add(2*time.Second))
			}
			if n := len(f.live); n != 1 {
				t.Fatalf("%d replicas in service or on their way (%v), want 1", n, liveIDs(c, "openfaas-fn/a"))
			}
			if lose == "replacement" && f.live[0] != old {
				t.Errorf("in service %v, want the old %s", liveIDs(c, "openfaas-fn/a"), old.id)
			}
		})
	}
}

// TestMergeThatSavesAGPUMayOpenOne: a merge's new replica goes to a GPU in
// use only, unless it saves a GPU's worth (scheduler.MergeOpensGPU): then
// the small replicas it replaces, which fill the GPU in use, leave no room
// for it there, and it may open another.
func TestMergeThatSavesAGPUMayOpenOne(t *testing.T) {
	for _, opens := range []bool{false, true} {
		c := New(inventory(1, 2), nil, Options{NoWarm: true})
		if _, err := c.Deploy(fn("a", 20, 1, 5, 10), t0); err != nil {
			t.Fatal(err)
		}
		f := c.functions["openfaas-fn/a"]
		olds := slices.Clone(f.live)
		for _, r := range olds {
			c.ReplicaReady(r.id, t0)
			if r.placement.GPUs[0] != "GPU-0-0" {
				t.Fatalf("%s on %v, want GPU-0-0", r.id, r.placement.GPUs)
			}
		}
		c.begin()
		var res Result
		m := c.merge(f, olds, scheduler.SliceConfig{SMPercent: 50, Batch: 1}, t0.Add(time.Second), "merge", &res)
		m.opens = opens
		c.placeAll(t0.Add(time.Second), &res)
		placed := m.placement != nil
		if placed != opens {
			t.Errorf("opens %v: placed %v, want %v", opens, placed, opens)
		}
		if placed && m.placement.GPUs[0] != "GPU-0-1" {
			t.Errorf("placed on %v, want GPU-0-1", m.placement.GPUs)
		}
	}
}
