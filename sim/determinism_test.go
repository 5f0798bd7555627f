package sim

import (
	"reflect"
	"testing"
	"time"
)

// A run is a function of its inputs: the same seed gives the same
// results, whatever runs beside it.
func TestRunsAreDeterministic(t *testing.T) {
	cat := synthCatalog(t, m("ma", 10), m("mb", 20), m("mc", 5))
	fns := []Function{
		{Name: "a", Model: "ma", SLO: 60 * time.Millisecond},
		{Name: "b", Model: "mb", SLO: 100 * time.Millisecond},
		{Name: "zoo", Model: "mc", Models: []string{"mc", "ma", "mb"}},
	}
	wl, err := Generator{Functions: fns, Weights: ZipfWeights(3, 1), ModelSkew: 1, Shape: Ramp{{0, 50}, {20 * time.Second, 400}, {40 * time.Second, 50}},
		Poisson: true, Duration: 40 * time.Second, Seed: 9}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Workload: wl, Inventory: cluster(t, 4, 2), Catalog: cat, Policies: PolicyNames()}
	var runs [][]*Result
	for _, par := range []int{1, 2, 1} {
		cfg.Parallel = par
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			r.Wall = 0 // the only wall-clock reading
		}
		runs = append(runs, res)
	}
	for i, r := range runs[0] {
		for _, other := range runs[1:] {
			if !reflect.DeepEqual(r, other[i]) {
				t.Errorf("%s: runs differ", r.Policy)
			}
		}
		if r.Completed == 0 {
			t.Errorf("%s completed nothing", r.Policy)
		}
	}
}
