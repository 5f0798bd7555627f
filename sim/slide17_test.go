package sim

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// slide17 is FaST-GShare's slide 17 in the simulator: n replicas of the
// RNNT stand-in (resnet152, as in the scenarios) on one V100, fully busy,
// racing (every one at 100 % SM) or in 12 % or 24 % partitions; the total
// throughput for n = 1..9.
func slide17(t *testing.T, c *Contention) (cat *Catalog, tput map[int][]float64) {
	t.Helper()
	path := FindTable(".")
	if path == "" {
		t.Skip("no measured table (" + TableName + ")")
	}
	cat, err := LoadTable(path, []string{"resnet152"})
	if err != nil {
		t.Fatal(err)
	}
	tput = map[int][]float64{}
	for _, sm := range []int{100, 12, 24} {
		for n := 1; n <= 9; n++ {
			at := make([]pin, n)
			for i := range at {
				at[i] = pin{0, sm, 100}
			}
			sum := 0.0
			for _, v := range closedLoop(t, cat, cluster(t, 1, 1), c, "resnet152", at) {
				sum += v
			}
			tput[sm] = append(tput[sm], sum)
		}
	}
	return cat, tput
}

// The slide's figures: partitions of 12 % and 24 % reach ≈46 and ≈50
// req/s at 9 replicas where racing pods plateau at ≈22 (anchors §1.8),
// ×2.09 and ×2.27. resnet152 is not RNNT, so the absolute rates differ;
// with the default penalty the ratios must land within 15 %.
func TestSlide17Calibration(t *testing.T) {
	_, tput := slide17(t, DefaultContention())
	var b strings.Builder
	fmt.Fprintf(&b, "| replicas | racing req/s | 12 %% req/s | 24 %% req/s |\n| ---: | ---: | ---: | ---: |\n")
	for n := 1; n <= 9; n++ {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.0f |\n", n, tput[100][n-1], tput[12][n-1], tput[24][n-1])
	}
	t.Log("\n" + b.String())
	for _, tt := range []struct {
		sm    int
		slide float64
	}{{12, 46.0 / 22}, {24, 50.0 / 22}} {
		got := tput[tt.sm][8] / tput[100][8]
		t.Logf("9 replicas, %d %% vs racing: x%.2f, slide x%.2f (%+.1f %%)", tt.sm, got, tt.slide, 100*(got/tt.slide-1))
		if math.Abs(got/tt.slide-1) > 0.15 {
			t.Errorf("%d %% partitions vs racing at 9 replicas: x%.2f, slide 17 x%.2f: more than 15 %% off", tt.sm, got, tt.slide)
		}
	}
	if os.Getenv("SLIDE17_SWEEP") != "" {
		for _, p := range []float64{0, 0.1, 0.2, 0.22, 0.25, 0.27, 0.3, 0.4} {
			_, tp := slide17(t, &Contention{Default: p})
			t.Logf("penalty %.2f: racing 3/9 %.0f/%.0f, x%.2f x%.2f", p, tp[100][2], tp[100][8], tp[12][8]/tp[100][8], tp[24][8]/tp[100][8])
		}
	}
}
