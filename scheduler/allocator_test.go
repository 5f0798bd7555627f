package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
)

func inventory(nodes ...[]int64) gpu.Inventory {
	var inv gpu.Inventory
	for n, mems := range nodes {
		node := gpu.Node{Name: fmt.Sprintf("n%d", n)}
		for i, m := range mems {
			node.GPUs = append(node.GPUs, gpu.Device{UUID: fmt.Sprintf("n%d-g%d", n, i), Node: node.Name, Index: i, Product: "p", MemoryBytes: m << 30, SMCount: 80})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	return inv
}

func TestReserveBestFit(t *testing.T) {
	type step struct {
		id      string
		req     gpu.Request
		wantGPU []string // nil: must not fit
	}
	tests := []struct {
		name  string
		inv   gpu.Inventory
		steps []step
	}{
		{"fills the fullest GPU first", inventory([]int64{16, 16}), []step{
			{"a", gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}, []string{"n0-g0"}},
			{"b", gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}, []string{"n0-g0"}},
			{"c", gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}, []string{"n0-g0"}},
			{"d", gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}, []string{"n0-g1"}},
		}},
		{"SM is the limit", inventory([]int64{16}), []step{
			{"a", gpu.Request{SMPercent: 60, MemoryBytes: 1 << 30}, []string{"n0-g0"}},
			{"b", gpu.Request{SMPercent: 41, MemoryBytes: 1 << 30}, nil},
			{"c", gpu.Request{SMPercent: 40, MemoryBytes: 1 << 30}, []string{"n0-g0"}},
		}},
		{"memory is the limit", inventory([]int64{16}), []step{
			{"a", gpu.Request{SMPercent: 10, MemoryBytes: 12 << 30}, []string{"n0-g0"}},
			{"b", gpu.Request{SMPercent: 10, MemoryBytes: 5 << 30}, nil},
			{"c", gpu.Request{SMPercent: 10, MemoryBytes: 4 << 30}, []string{"n0-g0"}},
		}},
		{"no memory given takes the whole GPU's memory", inventory([]int64{16, 16}), []step{
			{"a", gpu.Request{SMPercent: 10}, []string{"n0-g0"}},
			{"b", gpu.Request{SMPercent: 10}, []string{"n0-g1"}},
			{"c", gpu.Request{SMPercent: 10, MemoryBytes: 1}, nil},
		}},
		{"best fit leaves the big GPU free", inventory([]int64{16, 32}), []step{
			{"a", gpu.Request{SMPercent: 50, MemoryBytes: 10 << 30}, []string{"n0-g0"}},
			{"b", gpu.Request{SMPercent: 50, MemoryBytes: 20 << 30}, []string{"n0-g1"}},
		}},
		{"whole GPUs on the node with fewest free", inventory([]int64{16, 16, 16, 16}, []int64{16, 16}), []step{
			{"a", gpu.Request{WholeGPUs: 2}, []string{"n1-g0", "n1-g1"}},
			{"b", gpu.Request{WholeGPUs: 3}, []string{"n0-g0", "n0-g1", "n0-g2"}},
			{"c", gpu.Request{WholeGPUs: 2}, nil},
			{"d", gpu.Request{SMPercent: 10, MemoryBytes: 1 << 30}, []string{"n0-g3"}},
			{"e", gpu.Request{WholeGPUs: 1}, nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(tt.inv, nil)
			for _, s := range tt.steps {
				p, err := reserve(a, s.id, s.req)
				if s.wantGPU == nil {
					var nf *NoFitError
					if !errors.As(err, &nf) {
						t.Fatalf("%s: err = %v, want NoFitError (placed %+v)", s.id, err, p)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", s.id, err)
				}
				if !reflect.DeepEqual(p.GPUs, s.wantGPU) {
					t.Fatalf("%s: placed on %v, want %v", s.id, p.GPUs, s.wantGPU)
				}
			}
			checkInvariants(t, a)
		})
	}
}

func TestReleaseFreesAndRestoreRebooks(t *testing.T) {
	a := NewAllocator(inventory([]int64{16}), nil)
	req := gpu.Request{SMPercent: 50, MemoryBytes: 8 << 30}
	p1, err := reserve(a, "a", req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(a, "b", req); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(a, "c", req); err == nil {
		t.Fatal("third half-GPU replica must not fit")
	}
	if err := a.Release("a", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release("a", time.Time{}); !errors.Is(err, ErrUnknownReplica) {
		t.Fatalf("second release: %v", err)
	}
	if err := a.Restore("a2", p1); err != nil {
		t.Fatalf("restore into freed room: %v", err)
	}
	if err := a.Restore("a3", p1); err == nil {
		t.Fatal("restore must refuse a slice that no longer fits")
	}
	if err := a.Restore("x", Placement{Node: "n0", GPUs: []string{"gone"}, Slice: p1.Slice}); err == nil {
		t.Fatal("restore must refuse an unknown GPU")
	}
	u := a.Usage()[0]
	if u.SMAllocated != 100 || u.MemoryAllocated != 16<<30 || len(u.Replicas) != 2 {
		t.Fatalf("usage = %+v", u)
	}
}

// A warm replica booked again holds its memory and no SM share: it needs
// only memory free, and it comes back idle.
func TestRestoreIdleNeedsMemoryOnly(t *testing.T) {
	p := func(sm int, memGiB int64, u string) Placement {
		return Placement{Node: "n0", GPUs: []string{u}, Slice: gpu.Slice{SMPercent: sm, MemoryBytes: memGiB << 30}}
	}
	tests := []struct {
		name   string
		idle   Placement
		fits   bool
		sm     int   // SM % booked after
		memGiB int64 // memory booked after
	}{
		{"beside replicas in service that fill the GPU's SMs", p(50, 8, "n0-g0"), true, 100, 16},
		{"its memory not free", p(50, 9, "n0-g0"), false, 100, 8},
		{"on a GPU not in the inventory", p(50, 1, "gone"), false, 100, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(inventory([]int64{16}), nil)
			for _, id := range []string{"a", "b"} { // 100 % SM, 8 GiB in service
				if _, err := reserve(a, id, gpu.Request{SMPercent: 50, MemoryBytes: 4 << 30}); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Restore("w", tt.idle); err == nil {
				t.Fatal("booked in service, the warm replica fitted beside 100 % SM")
			}
			err := a.RestoreIdle("w", tt.idle, time.Time{})
			if (err == nil) != tt.fits {
				t.Fatalf("RestoreIdle: %v, want fits=%v", err, tt.fits)
			}
			u := a.Usage()[0]
			if u.SMAllocated != tt.sm || u.MemoryAllocated != tt.memGiB<<30 || u.Replicas["w"].Idle != tt.fits {
				t.Fatalf("usage = %+v", u)
			}
			checkInvariants(t, a)
		})
	}
}

func TestConcurrentReserveNeverOversubscribes(t *testing.T) {
	a := NewAllocator(gpu.BuiltinInventory("n"), nil)
	req := gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := reserve(a, fmt.Sprint("r", i), req); err == nil {
				mu.Lock()
				placed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if placed != 6 {
		t.Fatalf("placed %d replicas of 30%% SM on two GPUs, want 6", placed)
	}
	checkInvariants(t, a)
}

// TestRandomOperationsKeepInvariants is a property test: whatever the
// sequence of reservations, releases and node losses, no GPU is oversubscribed, every
// booking matches a held placement, and the same seed gives the same
// placements.
func TestRandomOperationsKeepInvariants(t *testing.T) {
	run := func(seed uint64) []string {
		rng := rand.New(rand.NewPCG(seed, seed))
		var nodes [][]int64
		for range 1 + rng.IntN(4) {
			var mems []int64
			for range 1 + rng.IntN(8) {
				mems = append(mems, []int64{16, 32, 80}[rng.IntN(3)])
			}
			nodes = append(nodes, mems)
		}
		a := NewAllocator(inventory(nodes...), nil)
		var log []string
		var live []string
		for i := range 300 {
			if rng.IntN(60) == 0 && len(nodes) > 1 {
				// Node loss: its replicas are re-placed elsewhere or wait.
				lost := a.RemoveNode(fmt.Sprintf("n%d", rng.IntN(len(nodes))), time.Time{})
				for _, id := range lost {
					for k, l := range live {
						if l == id {
							live = append(live[:k], live[k+1:]...)
							break
						}
					}
					if p, err := reserve(a, id+"-again", gpu.Request{SMPercent: 10, MemoryBytes: 1 << 30}); err == nil {
						live = append(live, id+"-again")
						log = append(log, fmt.Sprint(id, " re-placed ", p.GPUs))
					}
				}
				known := map[string]bool{}
				for _, u := range a.Usage() {
					known[u.Device.UUID] = true
				}
				for id, p := range a.Placements() {
					for _, g := range p.GPUs {
						if !known[g] {
							t.Fatalf("%s still placed on %s of a removed node", id, g)
						}
					}
				}
				checkInvariants(t, a)
				continue
			}
			if len(live) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(live))
				if err := a.Release(live[k], time.Time{}); err != nil {
					t.Fatal(err)
				}
				live = append(live[:k], live[k+1:]...)
				continue
			}
			req := gpu.Request{SMPercent: 1 + rng.IntN(100), MemoryBytes: int64(1+rng.IntN(20)) << 30}
			if rng.IntN(10) == 0 {
				req = gpu.Request{WholeGPUs: 1 + rng.IntN(3)}
			}
			id := fmt.Sprint("r", i)
			p, err := reserve(a, id, req)
			if err != nil {
				log = append(log, id+": pending")
				continue
			}
			live = append(live, id)
			log = append(log, fmt.Sprint(id, p.GPUs, p.Slice))
			checkInvariants(t, a)
		}
		return log
	}
	for seed := range uint64(20) {
		if first, second := run(seed), run(seed); !reflect.DeepEqual(first, second) {
			t.Fatalf("seed %d: placements differ between runs", seed)
		}
	}
}

func reserve(a *Allocator, id string, req gpu.Request) (Placement, error) {
	p, evicted, err := a.Place(id, req, Hints{})
	if len(evicted) > 0 {
		panic("no idle replicas here, nothing to evict")
	}
	return p, err
}

func checkInvariants(t *testing.T, a *Allocator) {
	t.Helper()
	held := a.Placements()
	for _, u := range a.Usage() {
		sm, mem := 0, int64(0)
		for id, b := range u.Replicas {
			if !b.Idle {
				sm += b.Slice.SMPercent
			}
			mem += b.Slice.MemoryBytes
			if _, ok := held[id]; !ok {
				t.Fatalf("GPU %s books %s, which holds no placement", u.Device.UUID, id)
			}
		}
		if sm != u.SMAllocated || mem != u.MemoryAllocated {
			t.Fatalf("GPU %s: totals %d%%/%d disagree with bookings %d%%/%d", u.Device.UUID, u.SMAllocated, u.MemoryAllocated, sm, mem)
		}
		if u.SMAllocated > 100 || u.MemoryAllocated > u.Device.MemoryBytes {
			t.Fatalf("GPU %s oversubscribed: %d%% SM, %d of %d bytes", u.Device.UUID, u.SMAllocated, u.MemoryAllocated, u.Device.MemoryBytes)
		}
	}
}

func TestParseScalePolicy(t *testing.T) {
	tests := []struct {
		name        string
		labels, ann map[string]string
		want        ScalePolicy
		wantErr     string
	}{
		{name: "defaults", want: ScalePolicy{Min: 1, Max: 20, ZeroDuration: DefaultZeroDuration, ParkedAuto: true, ParkedDefault: true}},
		{name: "labels", labels: map[string]string{LabelScaleMin: "2", LabelScaleMax: "4", LabelScaleZero: "true", LabelScaleZeroDuration: "5m"},
			want: ScalePolicy{Min: 2, Max: 4, Zero: true, ZeroDuration: 5 * 60e9, ParkedAuto: true, ParkedDefault: true}},
		{name: "annotation wins", labels: map[string]string{LabelScaleMax: "4"}, ann: map[string]string{LabelScaleMax: "6"},
			want: ScalePolicy{Min: 1, Max: 6, ZeroDuration: DefaultZeroDuration, ParkedAuto: true, ParkedDefault: true}},
		{name: "min 0", labels: map[string]string{LabelScaleMin: "0"}, want: ScalePolicy{Min: 0, Max: 20, ZeroDuration: DefaultZeroDuration, ParkedAuto: true, ParkedDefault: true}},
		{name: "bad min", labels: map[string]string{LabelScaleMin: "x"}, wantErr: "labels." + LabelScaleMin},
		{name: "max 0", ann: map[string]string{LabelScaleMax: "0"}, wantErr: "annotations." + LabelScaleMax},
		{name: "min above max", labels: map[string]string{LabelScaleMin: "3", LabelScaleMax: "2"}, wantErr: LabelScaleMin},
		{name: "bad zero", labels: map[string]string{LabelScaleZero: "yes please"}, wantErr: "labels." + LabelScaleZero},
		{name: "bad duration", labels: map[string]string{LabelScaleZeroDuration: "-1s"}, wantErr: "labels." + LabelScaleZeroDuration},
		{name: "parked", ann: map[string]string{AnnotationParked: " 2", LabelScaleMax: "4"}, want: ScalePolicy{Min: 1, Max: 4, ZeroDuration: DefaultZeroDuration, Parked: 2}},
		{name: "parked is an annotation", labels: map[string]string{AnnotationParked: "2"}, want: ScalePolicy{Min: 1, Max: 20, ZeroDuration: DefaultZeroDuration, ParkedAuto: true, ParkedDefault: true}},
		{name: "parked 0 parks none", ann: map[string]string{AnnotationParked: "0"}, want: ScalePolicy{Min: 1, Max: 20, ZeroDuration: DefaultZeroDuration}},
		{name: "parked above max", ann: map[string]string{AnnotationParked: "5", LabelScaleMax: "4"}, wantErr: "annotations." + AnnotationParked},
		{name: "bad parked", ann: map[string]string{AnnotationParked: "-1"}, wantErr: "annotations." + AnnotationParked},
		{name: "parked auto", ann: map[string]string{AnnotationParked: "auto "}, want: ScalePolicy{Min: 1, Max: 20, ZeroDuration: DefaultZeroDuration, ParkedAuto: true}},
		{name: "parked auto is lower case", ann: map[string]string{AnnotationParked: "Auto"}, wantErr: "annotations." + AnnotationParked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseScalePolicy(tt.labels, tt.ann)
			if tt.wantErr != "" {
				var fe *gpu.FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantErr {
					t.Fatalf("err = %v, want field %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestEvictionOrderAndCount: a slice that fits only once idle warm replicas
// go evicts them least recently idled first, ties by ID, whatever the
// cache lists under the GPU, and counts every eviction. The restored cases
// are warm replicas booked on this GPU that the cache lists under another
// one (a placement restored with its GPUs in that order, as the Kubernetes
// backend rebuilds them); they went in map order, uncounted.
func TestEvictionOrderAndCount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// Idled in this order; r1 and r5 tie, so ID decides.
	idled := []struct {
		id string
		at time.Time
	}{{"r3", t0}, {"r1", t0.Add(time.Second)}, {"r5", t0.Add(time.Second)}, {"r2", t0.Add(2 * time.Second)}, {"r4", t0.Add(3 * time.Second)}}
	slice := gpu.Slice{SMPercent: 10, MemoryBytes: 3 << 30}
	tests := []struct {
		name string
		inv  gpu.Inventory
		// book places the five replicas.
		book func(*Allocator) error
		req  gpu.Request
		want []string
	}{
		{"listed under this GPU", inventory([]int64{16}), func(a *Allocator) error {
			for _, r := range idled {
				if _, err := reserve(a, r.id, gpu.Request{SMPercent: slice.SMPercent, MemoryBytes: slice.MemoryBytes}); err != nil {
					return err
				}
			}
			return nil
		}, gpu.Request{SMPercent: 10, MemoryBytes: 5 << 30}, []string{"r3", "r1"}},
		{"restored, listed under another GPU", inventory([]int64{16, 16}), func(a *Allocator) error {
			for _, r := range idled {
				if err := a.Restore(r.id, Placement{Node: "n0", GPUs: []string{"n0-g1", "n0-g0"}, Slice: slice}); err != nil {
					return err
				}
			}
			return nil
		}, gpu.Request{SMPercent: 10, MemoryBytes: 5 << 30}, []string{"r3", "r1"}},
		{"restored, whole GPU wanted", inventory([]int64{16, 16}), func(a *Allocator) error {
			for _, r := range idled {
				if err := a.Restore(r.id, Placement{Node: "n0", GPUs: []string{"n0-g1", "n0-g0"}, Slice: slice}); err != nil {
					return err
				}
			}
			return nil
		}, gpu.Request{WholeGPUs: 1}, []string{"r3", "r1", "r5", "r2", "r4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Map iteration order differs from run to run: one lucky run
			// proves nothing.
			for run := range 50 {
				a := NewAllocator(tt.inv, nil)
				if err := tt.book(a); err != nil {
					t.Fatal(err)
				}
				for _, r := range idled {
					if err := a.Demote(r.id, r.at); err != nil {
						t.Fatal(err)
					}
				}
				_, evicted, err := a.Place("new", tt.req, Hints{Now: t0.Add(time.Minute)})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(evicted, tt.want) {
					t.Fatalf("run %d: evicted %v, want %v", run, evicted, tt.want)
				}
				if got := a.Cache().Stats().ReplicaEvictions; got != uint64(len(tt.want)) {
					t.Fatalf("run %d: %d evictions counted, want %d", run, got, len(tt.want))
				}
				checkInvariants(t, a)
			}
		})
	}
}

// A consolidation move names its target GPU: the replica goes there or
// nowhere, even where best fit would pick another.
func TestPlaceOnTargetGPU(t *testing.T) {
	const gi = 1 << 30
	tests := []struct {
		name    string
		target  string
		want    string // "": no fit
		evicted int
	}{
		{"the target, though another is fuller", "n0-g1", "n0-g1", 0},
		{"a full target: no fit, not another GPU", "n0-g0", "", 0},
		{"warm replicas on the target are evicted", "n0-g2", "n0-g2", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAllocator(inventory([]int64{16, 16, 16}), nil)
			now := time.Unix(0, 0)
			for id, p := range map[string]Placement{
				"full": {Node: "n0", GPUs: []string{"n0-g0"}, Slice: gpu.Slice{SMPercent: 90, MemoryBytes: 2 * gi}},
				"some": {Node: "n0", GPUs: []string{"n0-g1"}, Slice: gpu.Slice{SMPercent: 20, MemoryBytes: 2 * gi}},
				"warm": {Node: "n0", GPUs: []string{"n0-g2"}, Slice: gpu.Slice{SMPercent: 20, MemoryBytes: 14 * gi}},
			} {
				if err := a.Restore(id, p); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Demote("warm", now); err != nil {
				t.Fatal(err)
			}
			p, evicted, err := a.Place("new", gpu.Request{SMPercent: 20, MemoryBytes: 4 * gi}, Hints{Now: now, GPU: tc.target})
			if tc.want == "" {
				if err == nil {
					t.Fatalf("placed on %v, want no fit", p.GPUs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.GPUs[0] != tc.want || len(evicted) != tc.evicted {
				t.Errorf("placed on %v evicting %v, want %s evicting %d", p.GPUs, evicted, tc.want, tc.evicted)
			}
		})
	}
}

// A cost-saving replacement (Hints.Occupied) goes only where something is
// booked: opening an idle GPU would spend what it saves. Before, a resize
// started while the busy GPU was briefly full went to an idle one and held
// it until consolidation freed it again (sim TestConsolidationFreesAGPU:
// a vgg16 replica alone on a second GPU for a minute).
func TestOccupiedNeverOpensAnIdleGPU(t *testing.T) {
	a := NewAllocator(inventory([]int64{16, 16}), nil)
	if _, err := reserve(a, "a", gpu.Request{SMPercent: 60, MemoryBytes: 4 << 30}); err != nil {
		t.Fatal(err)
	}
	busy := a.Placements()["a"].GPUs[0]
	p, _, err := a.Place("r1", gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}, Hints{Occupied: true})
	if err != nil || p.GPUs[0] != busy {
		t.Fatalf("a replacement that fits beside a: placed %v, %v; want on %s", p.GPUs, err, busy)
	}
	if _, _, err := a.Place("r2", gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}, Hints{Occupied: true}); err == nil {
		t.Fatalf("a replacement that fits only on the idle GPU was placed: %v", a.Placements()["r2"])
	}
	if p, _, err := a.Place("n1", gpu.Request{SMPercent: 30, MemoryBytes: 4 << 30}, Hints{}); err != nil || p.GPUs[0] == busy {
		t.Fatalf("a new replica must still open the idle GPU: %v, %v", p.GPUs, err)
	}
}

// A GPU a process the function has parked can be handed comes before best
// fit: a replica placed there skips its container's start, which costs
// more than a GPU opened. It comes after the model's locality, and a GPU
// with no room for it is no choice at all.
func TestParkedNodeBeforeBestFit(t *testing.T) {
	tests := []struct {
		name    string
		parked  map[string]bool
		modelOn bool // the busy GPU holds the model
		want    string
	}{
		{"none parked: best fit beside the busy GPU", nil, false, "n0-g0"},
		{"parked on the other node", map[string]bool{"n1-g0": true}, false, "n1-g0"},
		{"parked on a node with no room", map[string]bool{"n2-g0": true}, false, "n0-g0"},
		{"the model's locality first", map[string]bool{"n1-g0": true}, true, "n0-g0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cache.New(cache.DefaultOptions)
			a := NewAllocator(inventory([]int64{16}, []int64{16}, []int64{8}), c)
			if _, _, err := a.Place("busy", gpu.Request{SMPercent: 60, MemoryBytes: 4 << 30}, Hints{GPU: "n0-g0"}); err != nil {
				t.Fatal(err)
			}
			if tt.modelOn {
				c.Preload("busy", "m", 1<<30, time.Unix(0, 0))
			}
			if _, _, err := a.Place("full", gpu.Request{SMPercent: 10, MemoryBytes: 5 << 30}, Hints{GPU: "n2-g0"}); err != nil {
				t.Fatal(err)
			}
			p, _, err := a.Place("r", gpu.Request{Model: "m", SMPercent: 30, MemoryBytes: 4 << 30}, Hints{Model: "m", Now: time.Unix(0, 0), Parked: tt.parked})
			if err != nil {
				t.Fatal(err)
			}
			if p.GPUs[0] != tt.want {
				t.Fatalf("placed on %v, want %s", p.GPUs, tt.want)
			}
			checkInvariants(t, a)
		})
	}
}
