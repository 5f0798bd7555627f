package sim

import (
	"testing"
	"time"
)

// -fast-scale-up 0.9 keeps a FaST-GShare function's profiled capacity at
// least the rate / 0.9 (HAS-GPU's ScaleUpThreshold); the default scales up
// on any gap, so it settles closer to the rate.
func TestFastGShareScaleUpHeadroom(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	wl, err := Generator{Functions: []Function{{Name: "f", Model: "m10", SLO: 50 * time.Millisecond, Max: 100}},
		Shape: Ramp{{0, 95}, {120 * time.Second, 95}}, Duration: 120 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		scaleUp, atLeast float64
	}{{1, 95}, {0.9, 95 / 0.9}, {0.5, 95 / 0.5}} {
		e, err := newEngine("fast-gshare", wl, cluster(t, 4, 4), cat, Options{FastScaleUp: tt.scaleUp})
		if err != nil {
			t.Fatal(err)
		}
		p := &fastFamily{}
		e.pol = p
		if err := e.run(); err != nil {
			t.Fatal(err)
		}
		c := 0.0
		for _, r := range p.fns[0].live {
			c += r.tput
		}
		// Within the 20 % scale-down band above the usable capacity.
		if c < tt.atLeast-1e-9 || c > 1.25*tt.atLeast+p.fns[0].best.tput {
			t.Errorf("scale-up at %.1f: capacity %.1f req/s at 95 req/s offered, want %.1f to 1.25 x that and a pod", tt.scaleUp, c, tt.atLeast)
		}
	}
}
