package scheduler

import (
	"reflect"
	"testing"
	"time"
)

func TestConsolidate(t *testing.T) {
	const gi = int64(1 << 30)
	now := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	stable := now.Add(-time.Hour)
	v100 := func(uuid string, reps ...ConsolidateReplica) ConsolidateGPU {
		return ConsolidateGPU{UUID: uuid, Product: "V100", MemoryBytes: 16 * gi, Replicas: reps}
	}
	live := func(id string, sm int, mem int64) ConsolidateReplica {
		return ConsolidateReplica{ID: id, SMPercent: sm, MemoryBytes: mem * gi}
	}
	warm := func(id string, mem int64) ConsolidateReplica {
		return ConsolidateReplica{ID: id, MemoryBytes: mem * gi, Warm: true}
	}
	fixed := func(r ConsolidateReplica) ConsolidateReplica { r.Fixed = true; return r }
	opts := DefaultConsolidateOptions
	cases := []struct {
		name string
		in   ConsolidateInput
		o    ConsolidateOptions
		want Consolidation
	}{
		{name: "the least loaded GPU moves onto the fullest that fits",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 50, 2)),
				v100("b", live("b1", 20, 2)),
				v100("c", live("c1", 70, 2)),
			}},
			want: Consolidation{Free: []string{"b"}, Moves: []Move{{"b1", "b", "c"}}}},
		{name: "nothing fits: SM over 100 everywhere",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 90, 2)),
				v100("b", live("b1", 20, 2)),
			}},
			want: Consolidation{}},
		{name: "all replicas of the GPU must fit, or none move",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 60, 2)),
				v100("b", live("b1", 30, 2), live("b2", 30, 2)),
			}},
			want: Consolidation{}},
		{name: "largest first: both replicas fit on two targets",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 70, 2)),
				v100("b", live("b1", 30, 2), live("b2", 20, 2)),
				v100("c", live("c1", 60, 2)),
			}},
			// b (50) is the least loaded; b1 (30) goes to a (70 → 100), b2 to c.
			want: Consolidation{Free: []string{"b"}, Moves: []Move{{"b1", "b", "a"}, {"b2", "b", "c"}}}},
		{name: "memory within the device",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 30, 15)),
				v100("b", live("b1", 20, 2)),
			}},
			want: Consolidation{}},
		{name: "a warm replica on the target yields its memory; one on the GPU freed is stopped",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 30, 6), warm("aw", 8)),
				v100("b", live("b1", 20, 4), warm("bw", 4)),
			}},
			want: Consolidation{Free: []string{"b"}, Moves: []Move{{"b1", "b", "a"}}, Yield: []string{"bw"}}},
		{name: "a fixed warm replica on the target keeps its memory: no move",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 30, 6), fixed(warm("aw", 8))),
				v100("b", live("b1", 20, 4), warm("bw", 4)),
			}},
			want: Consolidation{}},
		{name: "a fixed warm replica on one target: the move goes to another",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 60, 6), fixed(warm("aw", 8))),
				v100("b", live("b1", 20, 4)),
				v100("c", live("c1", 30, 6), warm("cw", 8)),
			}},
			want: Consolidation{Free: []string{"b"}, Moves: []Move{{"b1", "b", "c"}}}},
		{name: "a target that needs no eviction wins over a fuller one that does",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 70, 10), warm("aw", 5)),
				v100("b", live("b1", 10, 2)),
				v100("c", live("c1", 50, 2)),
			}},
			want: Consolidation{Free: []string{"b"}, Moves: []Move{{"b1", "b", "c"}}}},
		{name: "a GPU with only warm replicas frees with no move",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 70, 2)),
				v100("b", warm("bw", 3)),
			}},
			want: Consolidation{Free: []string{"b"}, Yield: []string{"bw"}}},
		{name: "a fixed replica keeps its GPU",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 90, 2)),
				v100("b", fixed(live("b1", 20, 2))),
				v100("c", fixed(warm("cw", 2))),
			}},
			want: Consolidation{}},
		{name: "another product is not a target",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				{UUID: "a", Product: "A100", MemoryBytes: 40 * gi, Replicas: []ConsolidateReplica{live("a1", 50, 2)}},
				v100("b", live("b1", 20, 2)),
			}},
			want: Consolidation{}},
		{name: "empty GPUs are not targets",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a"),
				v100("b", live("b1", 20, 2)),
			}},
			want: Consolidation{}},
		{name: "a GPU that received a move is not freed in the same pass",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 10, 2)),
				v100("b", live("b1", 20, 2)),
			}},
			want: Consolidation{Free: []string{"a"}, Moves: []Move{{"a1", "a", "b"}}}},
		{name: "several GPUs a pass, within the move budget",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 10, 2)),
				v100("b", live("b1", 15, 2)),
				v100("c", live("c1", 20, 2), live("c2", 20, 2)),
				v100("d", live("d1", 50, 2)),
			}},
			o: ConsolidateOptions{MaxMoves: 2, CoolDown: time.Minute},
			// a → d (60), b → d (75); c would need 2 more moves.
			want: Consolidation{Free: []string{"a", "b"}, Moves: []Move{{"a1", "a", "d"}, {"b1", "b", "d"}}}},
		{name: "fragmented room: one move among the others makes room to free a GPU",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 55, 2)),
				v100("b", live("b1", 50, 2), live("b2", 10, 2)),
				v100("c", live("c1", 50, 2), live("c2", 10, 2)),
			}},
			// No GPU frees as things stand (a1 needs 55, b1 and c1 50,
			// each GPU has at most 45 free). Moving c2 to a leaves c 50
			// free: a later pass frees b (b1 to c, b2 to a). a cannot be
			// freed by one or two moves (b and c keep 50 each).
			want: Consolidation{Moves: []Move{{"c2", "c", "a"}}, Room: "b"}},
		{name: "no move among the others has room: nothing",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 60, 2)),
				v100("b", live("b1", 60, 2), live("b2", 20, 2)),
				v100("c", live("c1", 70, 2), live("c2", 25, 2)),
			}},
			// Freeing a needs 60 on b or c: neither b2 nor c2 fits the
			// other (a is being freed); freeing b or c needs a1 or c1
			// moved, and they fit nowhere.
			want: Consolidation{}},
		{name: "a fixed replica is not moved to make room",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 55, 2)),
				v100("b", live("b1", 50, 2), live("b2", 10, 2)),
				v100("c", live("c1", 50, 2), fixed(live("c2", 10, 2))),
			}},
			want: Consolidation{}},
		{name: "repacking off",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 55, 2)),
				v100("b", live("b1", 50, 2), live("b2", 10, 2)),
				v100("c", live("c1", 50, 2), live("c2", 10, 2)),
			}},
			o:    ConsolidateOptions{MaxMoves: 20, CoolDown: time.Minute},
			want: Consolidation{}},
		{name: "busy: a move in flight or a replica waiting",
			in: ConsolidateInput{Busy: true, GPUs: []ConsolidateGPU{
				v100("a", live("a1", 50, 2)),
				v100("b", live("b1", 20, 2)),
			}},
			want: Consolidation{}},
		{name: "within the cool-down",
			in: ConsolidateInput{LastChange: now.Add(-30 * time.Second), GPUs: []ConsolidateGPU{
				v100("a", live("a1", 50, 2)),
				v100("b", live("b1", 20, 2)),
			}},
			want: Consolidation{}},
		{name: "off",
			in: ConsolidateInput{GPUs: []ConsolidateGPU{
				v100("a", live("a1", 50, 2)),
				v100("b", live("b1", 20, 2)),
			}},
			o:    ConsolidateOptions{CoolDown: time.Minute},
			want: Consolidation{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Now = now
			if in.LastChange.IsZero() {
				in.LastChange = stable
			}
			o := tc.o
			if o == (ConsolidateOptions{}) {
				o = opts
			}
			got := Consolidate(in, o)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
