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

func TestReport(t *testing.T) {
	tests := []struct {
		name string
		// before are the models Use loads (4 bytes each), in order.
		before []string
		report []string
		models []string // the replica's list after the report
		used   []string // models Where finds on g0 after
		gone   []string // models no longer on g0
		bytes  int64    // what the replica's memory counts after
	}{
		{name: "replaces the assumption", before: []string{"own"}, report: []string{"b", "a"}, models: []string{"b", "a"}, used: []string{"a", "b"}, gone: []string{"own"}, bytes: 0},
		{name: "keeps the size of a model held before", before: []string{"a", "b"}, report: []string{"a", "c"}, models: []string{"a", "c"}, used: []string{"a", "c"}, gone: []string{"b"}, bytes: 4},
		{name: "reorders by recency", before: []string{"a", "b"}, report: []string{"a", "b"}, models: []string{"a", "b"}, used: []string{"a", "b"}, bytes: 8},
		{name: "empty: holds nothing", before: []string{"a"}, report: []string{}, models: []string{}, gone: []string{"a"}},
		{name: "duplicates and blanks ignored", report: []string{"a", "", "a", "b"}, models: []string{"a", "b"}, used: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{NodeModels: 8, NodeTTL: time.Minute})
			c.AddReplica("r1", "g0", "n0", 100)
			c.AddReplica("r2", "g1", "n1", 100)
			for _, m := range tt.before {
				c.Use("r1", m, 4, t0)
			}
			statsBefore := c.Stats()
			if !c.Report("r1", tt.report, t0.Add(time.Second)) {
				t.Fatal("Report of a tracked replica = false")
			}
			if got := c.Models("r1"); !reflect.DeepEqual(got, tt.models) {
				t.Fatalf("models = %v, want %v", got, tt.models)
			}
			for _, m := range tt.used {
				if !c.Holds("r1", m) || !c.Where(m, t0.Add(time.Second)).GPUs["g0"] || !c.OnNode("n0", m, t0.Add(time.Second)) {
					t.Errorf("%s: not held by r1, on g0 and node n0 after the report", m)
				}
			}
			for _, m := range tt.gone {
				if c.Holds("r1", m) || c.ResidentOnGPU("g0", m) {
					t.Errorf("%s still on g0 after a report without it", m)
				}
			}
			if got := c.Stats(); got != statsBefore {
				t.Errorf("stats changed by a report: %+v, were %+v", got, statsBefore)
			}
			if got := c.Idle(""); len(got) != 0 {
				t.Fatalf("idle = %v", got)
			}
			c.SetIdle("r1", t0)
			if got := c.Idle("g0"); len(got) != 1 || got[0].Bytes != tt.bytes {
				t.Fatalf("idle r1 counts %v, want %d bytes", got, tt.bytes)
			}
			if c.Holds("r2", "a") {
				t.Fatal("another replica changed")
			}
		})
	}
	c := New(Options{})
	if c.Report("nobody", []string{"a"}, t0) {
		t.Fatal("Report of an unknown replica = true")
	}
	if c.ResidentOnGPU("", "a") {
		t.Fatal("a report of an unknown replica indexed its models")
	}
}

func TestFill(t *testing.T) {
	tests := []struct {
		name   string
		before []string // models Use loads first (4 bytes each)
		fill   string
		ok     bool
		models []string // after, most recently used first
	}{
		{name: "free room: held, least recently used", before: []string{"a"}, fill: "b", ok: true, models: []string{"a", "b"}},
		{name: "no room: nothing evicted", before: []string{"a", "b"}, fill: "c", ok: false, models: []string{"b", "a"}},
		{name: "held already: nothing changes", before: []string{"a", "b"}, fill: "a", ok: true, models: []string{"b", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options{NodeModels: 8, NodeTTL: time.Minute})
			c.AddReplica("r1", "g0", "n0", 8)
			for _, m := range tt.before {
				c.Use("r1", m, 4, t0)
			}
			before := c.Stats()
			if got := c.Fill("r1", tt.fill, 4, t0); got != tt.ok {
				t.Fatalf("Fill = %v, want %v", got, tt.ok)
			}
			if got := c.Models("r1"); !reflect.DeepEqual(got, tt.models) {
				t.Errorf("models = %v, want %v", got, tt.models)
			}
			c.SetIdle("r1", t0)
			if got := c.Idle("g0"); len(got) != 1 || got[0].Bytes != int64(4*len(tt.models)) {
				t.Errorf("idle replicas %+v, want r1 at %d bytes", got, 4*len(tt.models))
			}
			if tt.ok && (!c.Where(tt.fill, t0).GPUs["g0"] || !c.OnNode("n0", tt.fill, t0)) {
				t.Errorf("%s not found on g0 and n0 after Fill", tt.fill)
			}
			if got := c.Stats(); got != before {
				t.Errorf("stats changed by a fill: %+v, were %+v", got, before)
			}
		})
	}
	if c := New(Options{}); c.Fill("gone", "a", 1, t0) {
		t.Error("Fill of an untracked replica = true")
	}
}
