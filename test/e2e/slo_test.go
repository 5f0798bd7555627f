package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// loadPhase is a stretch of open-loop Poisson arrivals at one rate.
type loadPhase struct {
	name string
	rate float64 // req/s
	d    time.Duration
}

// TestLiveSLOUnderStepAndBurst is issue 12's live target: the local
// provider with emulated workers (profiled latency, model loads) takes a
// step and a burst through its own proxy, and the proxy's SLO metrics say
// how many requests missed. The load is open-loop, as users' is: a slow
// answer does not slow the arrivals.
func TestLiveSLOUnderStepAndBurst(t *testing.T) {
	c := newCreds(t)
	p := startProvider(t, c, t.TempDir(), 0)
	const fn = "slo-step"
	const slo = 100 * time.Millisecond
	dep := types.FunctionDeployment{Service: fn, Image: "example.com/" + fn, Namespace: defaultNS,
		Annotations: &map[string]string{"com.openfaas.gpu.model": "resnet50", "com.openfaas.gpu.slo": slo.String()},
		Labels:      &map[string]string{"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "20"}}
	if r := mustDo(t, p.HTTP, http.MethodPost, p.URL+"/system/functions", mustJSON(t, dep), &p.Creds, nil); r.Code != http.StatusAccepted {
		t.Fatalf("deploy %s: want 202, got %s", fn, r)
	}
	eventually(t, 30*time.Second, fn+" ready", func() (bool, string) {
		code, st := p.status(t, defaultNS, fn)
		return code == http.StatusOK && st.AvailableReplicas >= 1, fmt.Sprintf("%d %+v", code, st)
	})

	phases := []loadPhase{
		{"base", 20, 10 * time.Second},
		{"step", 120, 20 * time.Second},
		{"burst", 300, 5 * time.Second},
		{"after the burst", 120, 10 * time.Second},
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	t.Cleanup(client.CloseIdleConnections)
	var sent, failed atomic.Int64
	// Each phase's requests over the SLO as the client times them (a
	// little above the proxy's own timing), to say where misses are.
	late := make([]atomic.Int64, len(phases))
	count := make([]atomic.Int64, len(phases))
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(12, 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, ph := range phases {
		end := time.Now().Add(ph.d)
		next := time.Now()
		for next.Before(end) {
			next = next.Add(time.Duration(rng.ExpFloat64() / ph.rate * float64(time.Second)))
			time.Sleep(time.Until(next))
			wg.Add(1)
			sent.Add(1)
			count[i].Add(1)
			go func() {
				defer wg.Done()
				began := time.Now()
				defer func() {
					if time.Since(began) > slo {
						late[i].Add(1)
					}
				}()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/function/"+fn, nil)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}()
		}
		t.Logf("%s: %.0f req/s for %s done, %d sent", ph.name, ph.rate, ph.d, sent.Load())
	}
	wg.Wait()
	for i, ph := range phases {
		t.Logf("%s: %d requests, %d over the SLO as the client timed them", ph.name, count[i].Load(), late[i].Load())
	}

	r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/metrics", nil, nil, nil)
	if r.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %s", r)
	}
	m := promSamples(string(r.Body))
	labels := `{function="` + fn + `",namespace="` + defaultNS + `"}`
	timed := m["faas_gpu_invocation_duration_seconds_count"+labels]
	violations := m["faas_gpu_function_slo_violations_total"+labels]
	if timed != float64(sent.Load()) {
		t.Fatalf("the proxy timed %.0f invocations of %d sent", timed, sent.Load())
	}
	ratio := violations / timed
	t.Logf("live provider, step and burst: %d requests, %.0f over the %s SLO (%.2f %%), %d failed", sent.Load(), violations, slo, 100*ratio, failed.Load())
	// Issue 12's live target is at most 1 %; it is not held yet, so the
	// figure is reported, not asserted (measured 3.0 % twice on a
	// 2-core machine). Most misses are the first 2-3 s after the deploy:
	// an emulated worker reports ready before it has loaded its model and
	// its first request pays the load (about 1.3 s for resnet50), while the
	// template loads before /_/health says ready; a larger first slice
	// does not remove them. With the load before ready (tried, not
	// committed) the first 10 s miss none but the burst misses more, about
	// 3 % in all (docs/evaluation.md, "Issue 12 as a whole").
	if ratio > 0.01 {
		t.Logf("SLO violations %.2f %%, above issue 12's live target of 1 %% (reported, not asserted: see above)", 100*ratio)
	}
	if failed.Load() > 0 {
		t.Errorf("%d requests failed, want none", failed.Load())
	}
}
