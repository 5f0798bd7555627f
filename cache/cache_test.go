package cache

import (
	"reflect"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestUseHitsMissesAndLRU(t *testing.T) {
	c := New(Options{NodeModels: 8, NodeTTL: time.Minute})
	c.AddReplica("r1", "g0", "n0", 10)
	type step struct {
		model   string
		bytes   int64
		want    Outcome
		evicted []string
	}
	steps := []step{
		{"a", 4, Miss, nil},
		{"b", 4, Miss, nil},
		{"a", 4, Hit, nil},            // a becomes most recent
		{"c", 4, Miss, []string{"b"}}, // b is least recently used
		{"b", 4, NodeHit, []string{"a"}},
	}
	for i, s := range steps {
		got, ev := c.Use("r1", s.model, s.bytes, t0.Add(time.Duration(i)*time.Second))
		if got != s.want || !reflect.DeepEqual(ev, s.evicted) {
			t.Fatalf("step %d (%s): %v evicted %v, want %v evicted %v", i, s.model, got, ev, s.want, s.evicted)
		}
	}
	if got := c.Models("r1"); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Fatalf("models = %v", got)
	}
	want := Stats{Hits: 1, NodeHits: 1, Misses: 3, ModelEvictions: 2}
	if got := c.Stats(); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

func TestNodeTierTTLAndBound(t *testing.T) {
	c := New(Options{NodeModels: 2, NodeTTL: time.Minute})
	c.AddReplica("r1", "g0", "n0", 100)
	c.Use("r1", "a", 1, t0)
	c.RemoveReplica("r1", t0)
	if !c.OnNode("n0", "a", t0.Add(59*time.Second)) {
		t.Fatal("a was loaded on n0 a minute ago")
	}
	if c.OnNode("n0", "a", t0.Add(time.Minute)) {
		t.Fatal("a must expire after the TTL")
	}
	if c.OnNode("n1", "a", t0) {
		t.Fatal("n1 never had a")
	}
	c.AddReplica("r2", "g0", "n0", 100)
	c.Use("r2", "b", 1, t0)
	c.Use("r2", "c", 1, t0)
	if c.OnNode("n0", "a", t0) {
		t.Fatal("the node tier holds 2 models: a must be gone")
	}
}

func TestIdleWarmReplicas(t *testing.T) {
	c := New(DefaultOptions)
	c.AddReplica("r1", "g0", "n0", 100)
	c.AddReplica("r2", "g0", "n0", 100)
	c.AddReplica("r3", "g1", "n0", 100)
	c.Preload("r1", "resnet", 10, t0)
	c.Preload("r2", "resnet", 10, t0)
	c.Preload("r3", "bert", 10, t0)
	c.SetIdle("r2", t0.Add(time.Second))
	c.SetIdle("r1", t0.Add(2*time.Second))
	c.SetIdle("r3", t0.Add(3*time.Second))
	if got := ids(c.Idle("g0")); !reflect.DeepEqual(got, []string{"r2", "r1"}) {
		t.Fatalf("idle on g0 = %v, want LRU order r2, r1", got)
	}
	if got := ids(c.IdleHolding("resnet")); !reflect.DeepEqual(got, []string{"r1", "r2"}) {
		t.Fatalf("idle holding resnet = %v, want most recent first", got)
	}
	c.SetActive("r1")
	if got := ids(c.IdleHolding("resnet")); !reflect.DeepEqual(got, []string{"r2"}) {
		t.Fatalf("after reuse = %v", got)
	}
	if got := c.Expired(t0.Add(62*time.Second), time.Minute); !reflect.DeepEqual(got, []string{"r2"}) {
		t.Fatalf("expired = %v, want r2 only", got)
	}
	if !c.ResidentOnGPU("g1", "bert") || c.ResidentOnGPU("g1", "resnet") {
		t.Fatal("ResidentOnGPU wrong")
	}
}

func ids(rs []IdleReplica) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func TestConcurrentUse(t *testing.T) {
	c := New(DefaultOptions)
	for _, id := range []string{"a", "b", "c", "d"} {
		c.AddReplica(id, "g", "n", 50)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 500 {
				id := []string{"a", "b", "c", "d"}[(i+j)%4]
				c.Use(id, string(rune('m'+j%7)), 10, t0)
				c.Holds(id, "m")
			}
		}()
	}
	wg.Wait()
	s := c.Stats()
	if s.Hits+s.NodeHits+s.Misses != 8*500 {
		t.Fatalf("counted %d uses, want %d", s.Hits+s.NodeHits+s.Misses, 8*500)
	}
}
