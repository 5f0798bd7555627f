package profiler

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// maxErrorShare is the share of failed requests above which a phase is an
// error rather than a measurement: latencies of the requests that happened
// to succeed would describe a function that is not working.
const maxErrorShare = 0.01

// phase is one closed-loop load run: InFlight requests kept in flight, the
// first Warmup not recorded.
type phase struct {
	Label    string // "sm 25%", for progress lines
	InFlight int
	Warmup   time.Duration
	Window   time.Duration
}

// sendFunc sends one request; nil when it was answered 2xx.
type sendFunc func(ctx context.Context) error

// errorPause keeps a worker whose requests fail at once from spinning.
const errorPause = 10 * time.Millisecond

// drive runs ph against send and summarises the requests that completed
// inside the window. Requests still in flight when the window ends are
// cancelled and not counted, so throughput is completions per second of
// the window. Progress is written every pr.Every.
func drive(ctx context.Context, send sendFunc, ph phase, pr *progress) (Stats, error) {
	start := time.Now()
	warmEnd := start.Add(ph.Warmup)
	end := warmEnd.Add(ph.Window)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()

	rec := &recorder{}
	var wg sync.WaitGroup
	for range ph.InFlight {
		wg.Go(func() {
			for runCtx.Err() == nil {
				t0 := time.Now()
				err := send(runCtx)
				t1 := time.Now()
				if runCtx.Err() != nil || t1.After(end) {
					return // cut off by the end of the window
				}
				if !t1.Before(warmEnd) {
					if err != nil {
						rec.fail(err)
					} else {
						rec.ok(t1.Sub(t0))
					}
				}
				if err != nil {
					sleepCtx(runCtx, errorPause)
				}
			}
		})
	}
	stopProgress := pr.follow(ph, start, rec)
	wg.Wait()
	stopProgress()
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	st := rec.stats(ph.InFlight, ph.Window)
	pr.phaseDone(ph, st)
	return st, check(ph, st)
}

// check turns a phase that did not measure a working function into an
// error.
func check(ph phase, st Stats) error {
	total := st.Requests + st.Errors
	switch {
	case total == 0:
		return fmt.Errorf("%s: no request completed in %s: a request takes longer than --duration", ph.Label, ph.Window)
	case st.Requests == 0:
		return fmt.Errorf("%s: all %d requests failed (last: %s)", ph.Label, st.Errors, st.LastError)
	case float64(st.Errors) > maxErrorShare*float64(total):
		return fmt.Errorf("%s: %d of %d requests failed, more than %.0f%% (last: %s)", ph.Label, st.Errors, total, 100*maxErrorShare, st.LastError)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
