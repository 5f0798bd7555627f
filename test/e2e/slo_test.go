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
	tests := []struct {
		name string
		args []string
		// held: the 1 % target is asserted; without a standby the figure
		// is reported, the ablation beside it.
		held bool
	}{
		{"standby", nil, true},
		{"no standby", []string{"-standby=false"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ratio := liveStepAndBurst(t, tt.args); ratio > 0.01 && tt.held {
				t.Errorf("SLO violations %.2f %%, above issue 12's live target of 1 %%", 100*ratio)
			}
		})
	}
}

// liveStepAndBurst deploys resnet50 at a 100-ms SLO on a local provider
// started with args, drives the step and the burst, and returns the share
// of requests the proxy counted over the SLO.
func liveStepAndBurst(t *testing.T, args []string) float64 {
	c := newCreds(t)
	p := startProviderWith(t, c, t.TempDir(), 0, providerOpts{Args: args})
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
	// And per second of the run, by when they were sent.
	var total time.Duration
	for _, ph := range phases {
		total += ph.d
	}
	lateAt := make([]atomic.Int64, int(total/time.Second)+1)
	loadStart := time.Now()
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
						lateAt[min(int(began.Sub(loadStart)/time.Second), len(lateAt)-1)].Add(1)
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
	logTimeline(t, p, fn, loadStart, phases, lateAt)

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
	// Issue 12's live target: at most 1 %. A 6x step in one second
	// outruns the one 5 % replica 20 req/s needs (22.3 req/s at the SLO's
	// p99) for the 0.26 s the Rise pass takes to see it, and a new
	// replica serves only 0.49 s later, once its model is loaded: without
	// a standby that was 2.38-2.68 % (three runs; -standby=false), nearly
	// all in the step's first second, which no reaction after the step
	// can save. Since the lone-replica model rates small slices by their
	// partial batches, the step is served by two 10 % replicas and the
	// burst's first second (2.5x the step) misses too: 7.87-8.05 % (four
	// runs, at b3e2503 and after). The standby (lifecycle/standby.go), a 25 % replica loaded
	// out of service in the GPU memory nobody needs, is what the Rise pass
	// promotes at once: 0.13-0.15 % here, on a 2-core machine with the
	// race detector on and client, provider and workers in one box.
	// TestLiveSLOUnderStepAndBurst asserts the target with it and
	// reports the figure without.
	if failed.Load() > 0 {
		t.Errorf("%d requests failed, want none", failed.Load())
	}
	return ratio
}

// logTimeline logs, in seconds from the load's start, the seconds with
// late requests and what the provider did for fn meanwhile (its own log:
// scale-ups, placements, replicas ready), to tell where misses come from.
func logTimeline(t *testing.T, p *provider, fn string, start time.Time, phases []loadPhase, lateAt []atomic.Int64) {
	t.Helper()
	phaseAt := func(s float64) string {
		var end time.Duration
		for _, ph := range phases {
			end += ph.d
			if s < end.Seconds() {
				return ph.name
			}
		}
		return "after"
	}
	for s := range lateAt {
		if n := lateAt[s].Load(); n > 0 {
			t.Logf("  t=%2ds (%s): %d sent then over the SLO", s, phaseAt(float64(s)), n)
		}
	}
	for _, msg := range []string{"autoscaled", "replica placed", "replica ready"} {
		for _, m := range p.logEntries(msg) {
			ts, _ := m["ts"].(float64)
			if m["function"] != fn || ts == 0 {
				continue
			}
			at := time.Unix(0, int64(ts*1e9)).Sub(start).Seconds()
			detail := ""
			switch msg {
			case "autoscaled":
				detail = fmt.Sprintf("%v replicas: %v", m["replicas"], m["reason"])
			case "replica placed":
				detail = fmt.Sprintf("%v: %v%% SM, batch %v", m["replica"], m["smPercent"], m["batch"])
			case "replica ready":
				detail = fmt.Sprintf("%v after %v", m["replica"], m["startup"])
			}
			t.Logf("  t=%5.2fs (%s) %s %s", at, phaseAt(at), msg, detail)
		}
	}
}
