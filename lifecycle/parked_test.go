package lifecycle

import (
	"slices"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// parkAll is a backend that can park every function.
func parkAll(scheduler.Function) bool { return true }

// parking is spec asking for n parked processes.
func parking(spec scheduler.Function, n int) scheduler.Function {
	spec.Scale.Parked = n
	return spec
}

// effectsOf lists the IDs of res's effects of kind k.
func effectsOf(res Result, k Kind) []string {
	var ids []string
	for _, e := range res.Effects {
		if e.Kind == k {
			ids = append(ids, e.Replica.ID)
		}
	}
	return ids
}

// A function keeps the processes it asks parked from its deploy; a
// replica placed takes the oldest ready one and its successor is asked
// for at once; one still starting is never handed out.
func TestParkedProcessesAreTakenAndRefilled(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{CanPark: parkAll})
	res, err := c.Deploy(parking(fn("a", 20, 1, 1, 5), 2), t0)
	if err != nil {
		t.Fatal(err)
	}
	key := Key("openfaas-fn", "a")
	parked := effectsOf(res, Park)
	if len(parked) != 2 {
		t.Fatalf("deploy parked %v, want 2 processes", parked)
	}
	for _, e := range res.Effects {
		if e.Kind == Start && e.Parked != "" {
			t.Fatalf("the first replica took %q before any process was parked", e.Parked)
		}
	}
	if ready, starting := c.Parked(key); ready != 0 || starting != 2 {
		t.Fatalf("parked %d ready, %d starting; want 0 and 2", ready, starting)
	}

	// Only the second reports in: the scale-up takes it, not the first.
	c.ParkedReady(parked[1], Sight{All: true}, t0.Add(2*time.Second))
	res, _, err = c.Scale("openfaas-fn", "a", 3, t0.Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var took []string
	for _, e := range res.Effects {
		if e.Kind == Start {
			took = append(took, e.Parked)
		}
	}
	if !slices.Equal(took, []string{parked[1], ""}) {
		t.Fatalf("two replicas started taking %q, want the ready process then none", took)
	}
	refill := effectsOf(res, Park)
	if len(refill) != 1 || slices.Contains(parked, refill[0]) {
		t.Fatalf("refilled with %v, want one new process", refill)
	}
	if ready, starting := c.Parked(key); ready != 0 || starting != 2 {
		t.Fatalf("after the scale-up: parked %d ready, %d starting; want 0 and 2", ready, starting)
	}
	// A process taken is no longer parked: a late report of it is ignored.
	c.ParkedReady(parked[1], Sight{All: true}, t0.Add(4*time.Second))
	if ready, _ := c.Parked(key); ready != 0 {
		t.Fatalf("a taken process came back as parked (%d ready)", ready)
	}
}

// Where the backend cannot park a function, nothing of it is parked,
// whatever it asks, and no Start names a process.
func TestNothingParkedWhereTheBackendCannot(t *testing.T) {
	for _, can := range []func(scheduler.Function) bool{nil, func(scheduler.Function) bool { return false }} {
		c := New(inventory(1, 1), nil, Options{CanPark: can})
		checkNothingParked(t, c)
	}
}

func checkNothingParked(t *testing.T, c *Core) {
	t.Helper()
	res, err := c.Deploy(parking(fn("a", 20, 1, 1, 5), 2), t0)
	if err != nil {
		t.Fatal(err)
	}
	res2, _, err := c.Scale("openfaas-fn", "a", 3, t0)
	if err != nil {
		t.Fatal(err)
	}
	res.Effects = append(res.Effects, res2.Effects...)
	res.Effects = append(res.Effects, c.Tick(t0.Add(time.Second)).Effects...)
	for _, e := range res.Effects {
		if e.Kind == Park || e.Kind == Unpark || e.Parked != "" {
			t.Fatalf("effect %+v where the backend cannot park", e)
		}
	}
}

// A function deleted or updated ends what it parked; a process it had
// asked for that reports in afterwards is ignored, and an update parks
// afresh for the new spec.
func TestParkedEndWithTheirSpec(t *testing.T) {
	for _, op := range []string{"update", "delete"} {
		t.Run(op, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{CanPark: parkAll})
			res, err := c.Deploy(parking(fn("a", 20, 1, 1, 5), 2), t0)
			if err != nil {
				t.Fatal(err)
			}
			old := effectsOf(res, Park)
			c.ParkedReady(old[0], Sight{All: true}, t0.Add(time.Second))
			if op == "update" {
				res, err = c.Update(parking(fn("a", 30, 1, 1, 5), 2), t0.Add(2*time.Second))
			} else {
				res, err = c.Delete("openfaas-fn", "a", t0.Add(2*time.Second))
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := effectsOf(res, Unpark); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(old))) {
				t.Fatalf("%s unparked %v, want %v", op, got, old)
			}
			for _, e := range res.Effects {
				if e.Kind == Start && e.Parked != "" {
					t.Fatalf("%s started a replica on old process %q", op, e.Parked)
				}
			}
			wantNew := 0
			if op == "update" {
				wantNew = 2
			}
			if got := effectsOf(res, Park); len(got) != wantNew {
				t.Fatalf("%s parked %v afresh, want %d", op, got, wantNew)
			}
			c.ParkedReady(old[1], Sight{All: true}, t0.Add(3*time.Second))
			if ready, _ := c.Parked(Key("openfaas-fn", "a")); ready != 0 {
				t.Fatalf("an old process that reported in after the %s is parked", op)
			}
		})
	}
}

// A process that exits is replaced at the next tick, not at once; a
// deploy aborted leaves nothing parked.
func TestParkedGoneAndAbort(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{CanPark: parkAll})
	res, err := c.Deploy(parking(fn("a", 20, 1, 1, 5), 1), t0)
	if err != nil {
		t.Fatal(err)
	}
	key := Key("openfaas-fn", "a")
	id := effectsOf(res, Park)[0]
	if got := effectsOf(c.ParkedGone(id, t0.Add(time.Second)), Park); len(got) != 0 {
		t.Fatalf("a parked process gone was replaced at once: %v", got)
	}
	if ready, starting := c.Parked(key); ready+starting != 0 {
		t.Fatalf("a gone process still counts: %d ready, %d starting", ready, starting)
	}
	next := effectsOf(c.Tick(t0.Add(2*time.Second)), Park)
	if len(next) != 1 || next[0] == id {
		t.Fatalf("the tick parked %v, want one new process", next)
	}

	if _, err := c.Deploy(parking(fn("b", 20, 1, 1, 5), 1), t0); err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if ready, starting := c.Parked(Key("openfaas-fn", "b")); ready+starting != 0 || len(c.parkedBy) != 1 {
		t.Fatalf("an aborted deploy left processes parked: %d ready, %d starting, %d known", ready, starting, len(c.parkedBy))
	}

	// An update that ends a's process, or a scale-up that takes it and
	// parks its successor, leaves the pool as it was once aborted.
	c.ParkedReady(next[0], Sight{All: true}, t0.Add(3*time.Second))
	for _, op := range []string{"update", "scale"} {
		var err error
		if op == "update" {
			_, err = c.Update(parking(fn("a", 20, 1, 1, 5), 1), t0.Add(4*time.Second))
		} else {
			_, _, err = c.Scale("openfaas-fn", "a", 2, t0.Add(4*time.Second))
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Abort()
		if ready, starting := c.Parked(key); ready != 1 || starting != 0 || len(c.parkedBy) != 1 || c.parkedBy[next[0]] != key {
			t.Fatalf("an aborted %s: %d ready, %d starting, known %v; want %s ready alone", op, ready, starting, c.parkedBy, next[0])
		}
	}
}

// deployRNParked deploys rnSpec asking n parked processes on one node of
// two GPUs, where canPark lets the core park, and reports those it parks
// ready at once.
func deployRNParked(t *testing.T, store *profiles.Store, canPark func(scheduler.Function) bool, n int) *Core {
	t.Helper()
	c := New(inventory(1, 2), nil, Options{Profiles: store, CanPark: canPark})
	res, err := c.Deploy(parking(rnSpec(), n), t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range effectsOf(res, Park) {
		c.ParkedReady(id, Sight{All: true}, t0)
	}
	return c
}

// A replica's Start takes a parked process when its scale-up is the
// autoscaler's too, and a standby takes one as it starts.
func TestAutoscaledStartsTakeParked(t *testing.T) {
	c := deployRNParked(t, builtinStore(t), parkAll, 2)
	var l Load
	took := 0
	for s := 1; s <= 10; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		res := tickWith(c, rnKey, &l, uint64(100*s), now)
		for _, e := range res.Effects {
			if e.Kind == Start && e.Parked != "" {
				took++
			}
			if e.Kind == Park {
				c.ParkedReady(e.Replica.ID, Sight{All: true}, now)
			}
		}
		readyAll(c, now)
	}
	if took == 0 {
		t.Fatal("a rising load's replicas took no parked process")
	}
	if ready, starting := c.Parked(rnKey); ready != 2 || starting != 0 {
		t.Fatalf("after the rise: %d ready, %d starting; want the pool refilled to 2", ready, starting)
	}
}

// A parked process serves only a placement on its node: a replica placed
// on another node starts its own process, and the pool follows it there.
func TestParkedFollowThePlacements(t *testing.T) {
	c := New(inventory(2, 1), nil, Options{CanPark: parkAll})
	res, err := c.Deploy(parking(fn("a", 60, 1, 1, 5), 1), t0)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	var parks Effect
	for _, e := range res.Effects {
		switch e.Kind {
		case Start:
			first = e.Replica.Placement.Node
		case Park:
			parks = e
		}
	}
	if parks.Replica.Placement == nil || parks.Replica.Placement.Node != first {
		t.Fatalf("deploy parked %+v, want one on the first replica's node %s", parks, first)
	}
	c.ParkedReady(parks.Replica.ID, Sight{All: true}, t0.Add(time.Second))
	// 60 % twice does not fit one GPU: the second replica goes to the
	// other node.
	res, _, err = c.Scale("openfaas-fn", "a", 2, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var start, park Effect
	for _, e := range res.Effects {
		switch e.Kind {
		case Start:
			start = e
		case Park:
			park = e
		}
	}
	if start.Replica.Placement == nil || start.Replica.Placement.Node == first {
		t.Fatalf("the second replica went to %+v, want the other node", start.Replica.Placement)
	}
	if start.Parked != "" {
		t.Fatalf("a replica on %s took process %q parked on %s", start.Replica.Placement.Node, start.Parked, first)
	}
	if got := effectsOf(res, Unpark); !slices.Equal(got, []string{parks.Replica.ID}) {
		t.Fatalf("unparked %v, want the process on %s", got, first)
	}
	if park.Replica.Placement == nil || park.Replica.Placement.Node != start.Replica.Placement.Node {
		t.Fatalf("parked %+v, want one on %s", park, start.Replica.Placement.Node)
	}
}

// A function that asks for "auto" keeps one parked until its starts show
// more at once: as many as started within one parked process's start-up,
// learnt from its first; starts older than parkedMemory are forgotten and
// the processes they kept are ended, those still starting first.
func TestParkedAutoFollowsTheStarts(t *testing.T) {
	c := New(inventory(1, 2), nil, Options{CanPark: parkAll})
	spec := fn("a", 10, 1, 1, 10)
	spec.Scale.ParkedAuto = true
	key := Key("openfaas-fn", "a")
	res, err := c.Deploy(spec, t0)
	if err != nil {
		t.Fatal(err)
	}
	parked := effectsOf(res, Park)
	if len(parked) != 1 {
		t.Fatalf("deploy parked %v, want 1 process", parked)
	}
	// Its start-up is 5 s: the window its starts are counted in.
	c.ParkedReady(parked[0], Sight{All: true}, t0.Add(5*time.Second))

	at := t0.Add(6 * time.Second)
	res, _, err = c.Scale("openfaas-fn", "a", 4, at)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(effectsOf(res, Start)); n != 3 {
		t.Fatalf("the scale-up started %d replicas, want 3", n)
	}
	// Three starts within 5 s: three parked, the one taken included.
	if ready, starting := c.Parked(key); ready != 0 || starting != 3 {
		t.Fatalf("after three starts at once: parked %d ready, %d starting; want 0 and 3", ready, starting)
	}
	if n := c.ParkedTarget(key); n != 3 {
		t.Fatalf("ParkedTarget after three starts at once = %d, want 3", n)
	}
	if n := len(effectsOf(c.Tick(at.Add(time.Second)), Park)); n != 0 {
		t.Fatalf("the next tick parked %d more, want none", n)
	}

	later := at.Add(parkedMemory + time.Second)
	res = c.Tick(later)
	if gone := effectsOf(res, Unpark); len(gone) != 2 {
		t.Fatalf("with its starts forgotten: unparked %v, want 2 of 3", gone)
	}
	if ready, starting := c.Parked(key); ready+starting != 1 || c.ParkedTarget(key) != 1 {
		t.Fatalf("with its starts forgotten: parked %d ready, %d starting, target %d; want 1 in all", ready, starting, c.ParkedTarget(key))
	}
}

// A process whose server shows it cannot be parked ends its function's
// parking: the others end, none is asked for at the next ticks, and its
// next spec parks again.
func TestParkedRefusedStopsParking(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{CanPark: parkAll})
	key := Key("openfaas-fn", "a")
	res, err := c.Deploy(parking(fn("a", 20, 1, 1, 5), 2), t0)
	if err != nil {
		t.Fatal(err)
	}
	parked := effectsOf(res, Park)
	if len(parked) != 2 {
		t.Fatalf("deploy parked %v, want 2", parked)
	}
	res = c.ParkedRefused(parked[0], "GET /_/gpu answered 404", t0.Add(time.Second))
	if got := effectsOf(res, Unpark); !slices.Equal(got, parked[1:]) {
		t.Fatalf("refusal unparked %v, want the other process %v (the refused one is the backend's to end)", got, parked[1:])
	}
	if got := c.ParkedTarget(key); got != 0 {
		t.Fatalf("after a refusal the function keeps %d parked, want 0", got)
	}
	if got := c.ParkedRefusal(key); got != "GET /_/gpu answered 404" {
		t.Fatalf("ParkedRefusal = %q, want the backend's reason", got)
	}
	for i := 2; i < 5; i++ {
		if got := effectsOf(c.Tick(t0.Add(time.Duration(i)*time.Second)), Park); len(got) != 0 {
			t.Fatalf("tick %d parked %v after a refusal", i, got)
		}
	}
	if res, _, err = c.Scale("openfaas-fn", "a", 2, t0.Add(6*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Effects {
		if e.Kind == Park || (e.Kind == Start && e.Parked != "") {
			t.Fatalf("a scale-up after a refusal parked or took %q", e.Replica.ID)
		}
	}
	// A late or repeated refusal of a process already gone changes nothing.
	if res := c.ParkedRefused(parked[0], "again", t0.Add(7*time.Second)); len(res.Effects) != 0 {
		t.Fatalf("a second refusal had effects %v", res.Effects)
	}
	res, err = c.Update(parking(fn("a", 30, 1, 1, 5), 2), t0.Add(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := effectsOf(res, Park); len(got) != 2 {
		t.Fatalf("the updated function parked %v, want 2: a new spec may bring a server that can", got)
	}
	if got := c.ParkedRefusal(key); got != "" {
		t.Fatalf("after an update ParkedRefusal = %q, want none", got)
	}
}

// A parked process is handed only a GPU in its sight, as its backend
// reported it: the placement prefers such a GPU where it has room, and a
// replica placed on a GPU no ready process sees starts its own and parks
// a process afresh in place of a blind one, which would see what is held
// there now.
func TestParkedProcessesAreHandedOnlyWhatTheySee(t *testing.T) {
	tests := []struct {
		name      string
		sm        int
		sight     Sight
		wantGPU   string
		wantTaken bool
	}{
		{"sees the other GPU: placed there, before best fit", 30, Sight{GPUs: []string{"GPU-0-1"}}, "GPU-0-1", true},
		{"sees the full GPU only: starts its own, parks afresh", 60, Sight{GPUs: []string{"GPU-0-0"}}, "GPU-0-1", false},
		{"sees every GPU of its node", 60, Sight{All: true}, "GPU-0-1", true},
		{"sees none: starts its own, parks afresh", 30, Sight{}, "GPU-0-0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 2), nil, Options{CanPark: parkAll})
			res, err := c.Deploy(parking(fn("a", tt.sm, 2, 1, 5), 1), t0)
			if err != nil {
				t.Fatal(err)
			}
			parked := effectsOf(res, Park)
			if len(parked) != 1 {
				t.Fatalf("deploy parked %v, want 1 process", parked)
			}
			c.ParkedReady(parked[0], tt.sight, t0.Add(time.Second))
			res, _, err = c.Scale("openfaas-fn", "a", 2, t0.Add(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var start *Effect
			for i, e := range res.Effects {
				if e.Kind == Start {
					start = &res.Effects[i]
				}
			}
			if start == nil || start.Replica.Placement == nil {
				t.Fatalf("the scale-up started no placed replica: %+v", res.Effects)
			}
			if got := start.Replica.Placement.GPUs; !slices.Equal(got, []string{tt.wantGPU}) {
				t.Errorf("placed on %v, want %s", got, tt.wantGPU)
			}
			if taken := start.Parked == parked[0]; taken != tt.wantTaken {
				t.Errorf("took %q, want taken %v", start.Parked, tt.wantTaken)
			}
			unparked := effectsOf(res, Unpark)
			blind := !tt.wantTaken
			if blind != slices.Equal(unparked, parked) {
				t.Errorf("unparked %v; want the blind process parked afresh: %v", unparked, blind)
			}
			if ready, starting := c.Parked(Key("openfaas-fn", "a")); ready+starting != 1 {
				t.Errorf("%d ready and %d starting after the scale-up, want 1 in all", ready, starting)
			}
		})
	}
}

// A scale-up that needs more replicas than the function has parked gives
// the ones that take a parked process the slices that carry the most:
// they serve after a second and a model load, the rest after a container
// start. Beside a core that parks nothing, fed the same step, the parked
// start is the larger slice and the step takes fewer new replicas.
func TestAParkedProcessCarriesTheRise(t *testing.T) {
	store := builtinStore(t)
	stepStarts := func(canPark func(scheduler.Function) bool) []Effect {
		c := deployRNParked(t, store, canPark, 1)
		var l Load
		for s := 1; s <= 45; s++ {
			now := t0.Add(time.Duration(s) * time.Second)
			n := uint64(50)
			if s > 40 {
				n = 600
			}
			var starts []Effect
			for _, e := range tickWith(c, rnKey, &l, n, now).Effects {
				switch e.Kind {
				case Park:
					c.ParkedReady(e.Replica.ID, Sight{All: true}, now)
				case Start:
					starts = append(starts, e)
				}
			}
			if s > 40 && len(starts) > 0 {
				return starts
			}
			readyAll(c, now)
		}
		t.Fatal("a step from 50 to 600 req/s started nothing")
		return nil
	}
	cold := stepStarts(nil)
	parked := stepStarts(parkAll)
	if len(cold) < 2 {
		t.Fatalf("with nothing parked the step started %d replica(s); the test needs a step of several", len(cold))
	}
	if parked[0].Parked == "" {
		t.Fatalf("the step's first start took no parked process: %+v", parked[0])
	}
	most := 0
	for _, e := range cold {
		most = max(most, e.Replica.Config.SMPercent)
	}
	if got := parked[0].Replica.Config.SMPercent; got <= most {
		t.Fatalf("the parked start has %d %% SM; the largest of the step's %d cold starts has %d %%", got, len(cold), most)
	}
	if len(parked) >= len(cold) {
		t.Fatalf("the step started %d replicas with one parked, %d with none", len(parked), len(cold))
	}
}
