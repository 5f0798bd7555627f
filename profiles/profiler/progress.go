package profiler

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progress writes one line per event and, while a phase runs, one line per
// Every. Lines rather than a redrawn status line: they read the same in a
// terminal, a CI log and a test.
type progress struct {
	w     io.Writer
	every time.Duration
	mu    sync.Mutex // one line at a time
}

func newProgress(w io.Writer, every time.Duration) *progress {
	if w == nil {
		w = io.Discard
	}
	if every <= 0 {
		every = time.Second
	}
	return &progress{w: w, every: every}
}

func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// follow prints the state of a running phase every p.every until the
// returned function is called.
func (p *progress) follow(ph phase, start time.Time, rec *recorder) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n, errs, p50 := rec.snapshot()
				p.printf("%s", runningLine(ph, time.Since(start), n, errs, p50))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// runningLine is a phase's progress after elapsed (warm-up included):
//
//	sm 25% (1 in flight): 12.3 s / 20 s, 412 req, p50 23.1 ms
func runningLine(ph phase, elapsed time.Duration, n, errs int, p50 time.Duration) string {
	head := fmt.Sprintf("%s (%d in flight): ", ph.Label, ph.InFlight)
	if elapsed < ph.Warmup {
		return head + fmt.Sprintf("warming up, %s / %s", seconds(elapsed), seconds(ph.Warmup))
	}
	line := head + fmt.Sprintf("%s / %s, %d req, p50 %s", seconds(min(elapsed-ph.Warmup, ph.Window)), seconds(ph.Window), n, millis(p50))
	if errs > 0 {
		line += fmt.Sprintf(", %d failed", errs)
	}
	return line
}

func (p *progress) phaseDone(ph phase, st Stats) {
	line := fmt.Sprintf("%s (%d in flight): %d req in %s, %.1f req/s, p50 %s, p90 %s, p99 %s",
		ph.Label, ph.InFlight, st.Requests, seconds(st.Window), st.Throughput, millis(st.P50), millis(st.P90), millis(st.P99))
	if st.Errors > 0 {
		line += fmt.Sprintf(", %d failed (last: %s)", st.Errors, st.LastError)
	}
	p.printf("%s", line)
}

// seconds formats like "12.3 s"; whole seconds drop the decimal ("20 s").
func seconds(d time.Duration) string {
	s := d.Seconds()
	if s == float64(int64(s)) {
		return fmt.Sprintf("%d s", int64(s))
	}
	return fmt.Sprintf("%.1f s", s)
}

// millis formats like "23.1 ms".
func millis(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
