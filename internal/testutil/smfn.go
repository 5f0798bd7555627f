package testutil

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// ReadSMFNProfile reads what `faas-gpu profile` wrote at path for smfn
// (local/testdata/smfn with SMFN_WORK_MS=3, batch 1) measured at sms on
// product, and fails t unless it describes smfn as it behaves: one point
// per SM % in order, latency falling as the SM % rises, and at sm 10 the
// slice's own 30 ms rather than requests queueing behind each other.
func ReadSMFNProfile(t testing.TB, path, product string, sms []int) profiles.Profile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profiles.Parse(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if p.Model != "smfn" || p.GPU != product || len(p.Points) != len(sms) ||
		!strings.HasPrefix(p.Source, "measured by faas-gpu profile on "+time.Now().UTC().Format(time.DateOnly)) {
		t.Fatalf("profile of model %q on %q with %d points, want smfn on %s with %d:\n%s", p.Model, p.GPU, len(p.Points), product, len(sms), data)
	}
	// Marshal orders points by SM %.
	for i, pt := range p.Points {
		if pt.SM != sms[i] || pt.Batch != 1 || pt.Quota != 100 {
			t.Fatalf("point %d: %+v\n%s", i, pt, data)
		}
		if i > 0 && pt.Latency >= p.Points[i-1].Latency {
			t.Errorf("latency at sm %d (%v ms) is not below sm %d (%v ms)", pt.SM, pt.Latency, p.Points[i-1].SM, p.Points[i-1].Latency)
		}
	}
	if sms[0] == 10 {
		if lat := p.Points[0].Latency; lat < 30 || lat > 90 {
			t.Errorf("latency at sm 10 is %v ms, want smfn's 30 ms plus overhead", lat)
		}
	}
	return p
}
