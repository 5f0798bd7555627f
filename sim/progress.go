package sim

import (
	"fmt"
	"io"
	"time"
)

// progress reports a long run on stderr about every two wall seconds. It
// is the only reader of the wall clock in the package and changes nothing
// the run computes.
type progress struct {
	w      io.Writer
	name   string
	total  int
	start  time.Time
	last   time.Time
	events uint64
}

func newProgress(w io.Writer, name string, wl *Workload) *progress {
	now := time.Now()
	return &progress{w: w, name: name, total: len(wl.Arrivals), start: now, last: now}
}

func (p *progress) tick(e *Engine) {
	p.events++
	if p.w == nil || p.events&0xffff != 0 {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= 2*time.Second {
		p.last = now
		done := e.met.completed
		fmt.Fprintf(p.w, "%s: %s of %s simulated, %d/%d requests done, %.0f requests/s\n",
			p.name, e.now.Truncate(time.Second), e.wl.Duration, done, p.total, float64(done)/now.Sub(p.start).Seconds())
	}
}

func (p *progress) done(e *Engine) {
	e.met.wall = time.Since(p.start)
	e.met.events = p.events
	if p.w != nil && e.met.wall >= 2*time.Second {
		fmt.Fprintf(p.w, "%s: done in %s\n", p.name, e.met.wall.Round(time.Millisecond))
	}
}
