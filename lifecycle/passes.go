package lifecycle

import "time"

// Passes is when a backend runs the core's periodic passes, one schedule
// for both backends and the simulator: it wakes every Interval (the rise
// interval when a Rise pass runs between ticks, 0 < rise < tick; else the
// tick), and each wake-up runs Tick when one is due, else Rise. Times are
// given, not read: the simulator's are virtual.
type Passes struct {
	tick, every time.Duration
	next        time.Time // when the next Tick is due
}

// NewPasses schedules Tick every tick and, between ticks, Rise every rise,
// from start.
func NewPasses(tick, rise time.Duration, start time.Time) *Passes {
	every := tick
	if rise > 0 && rise < tick {
		every = rise
	}
	return &Passes{tick: tick, every: every, next: start.Add(tick)}
}

// Interval is how often the backend wakes.
func (p *Passes) Interval() time.Duration { return p.every }

// TickDue reports whether the wake-up at now runs Tick (and then counts
// the next Tick from it), else Rise. One within half an interval of the
// Tick's time counts as due: a ticker's times jitter.
func (p *Passes) TickDue(now time.Time) bool {
	if now.Add(p.every / 2).Before(p.next) {
		return false
	}
	p.next = p.next.Add(p.tick)
	return true
}
