package profiler

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRunningLine(t *testing.T) {
	ph := phase{Label: "sm 25%", InFlight: 1, Warmup: 2 * time.Second, Window: 20 * time.Second}
	tests := []struct {
		name    string
		elapsed time.Duration
		n, errs int
		p50     time.Duration
		want    string
	}{
		{"warming up", 1200 * time.Millisecond, 0, 0, 0, "sm 25% (1 in flight): warming up, 1.2 s / 2 s"},
		{"measuring", 14300 * time.Millisecond, 412, 0, ms(23.1), "sm 25% (1 in flight): 12.3 s / 20 s, 412 req, p50 23.1 ms"},
		{"with failures", 5 * time.Second, 10, 2, ms(3), "sm 25% (1 in flight): 3 s / 20 s, 10 req, p50 3.0 ms, 2 failed"},
		{"never past the window", 30 * time.Second, 9, 0, ms(1), "sm 25% (1 in flight): 20 s / 20 s, 9 req, p50 1.0 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runningLine(ph, tt.elapsed, tt.n, tt.errs, tt.p50); got != tt.want {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the progress goroutine and the
// test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestDriveReportsProgressAndRecordsOnlyTheWindow(t *testing.T) {
	var out syncBuffer
	pr := newProgress(&out, 40*time.Millisecond)
	var sent sync.Map
	send := func(ctx context.Context) error {
		sent.Store(time.Now(), true)
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	ph := phase{Label: "sm 50%", InFlight: 2, Warmup: 100 * time.Millisecond, Window: 300 * time.Millisecond}
	start := time.Now()
	st, err := drive(context.Background(), send, ph, pr)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 2*time.Second {
		t.Errorf("drive took %v, want warm-up + window (400ms)", took)
	}
	total := 0
	sent.Range(func(any, any) bool { total++; return true })
	// Two in flight at ≥ 2 ms each: at most 300 recorded of 400 sent.
	if st.Requests == 0 || st.Requests >= total || st.Requests > 300 {
		t.Errorf("recorded %d of %d requests; want the window's only", st.Requests, total)
	}
	if st.P50 < 2*time.Millisecond || st.InFlight != 2 || st.Window != ph.Window {
		t.Errorf("stats %+v", st)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 4 {
		t.Fatalf("want warm-up, running and final lines, got:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "sm 50% (2 in flight): warming up, ") {
		t.Errorf("no warm-up line:\n%s", out.String())
	}
	running := regexp.MustCompile(`^sm 50% \(2 in flight\): \d+\.\d s / 0\.3 s, \d+ req, p50 \d+\.\d ms$`)
	seen := false
	for _, l := range lines {
		seen = seen || running.MatchString(l)
	}
	if !seen {
		t.Errorf("no running line like %s:\n%s", running, out.String())
	}
	final := regexp.MustCompile(`^sm 50% \(2 in flight\): \d+ req in 0\.3 s, [\d.]+ req/s, p50 [\d.]+ ms, p90 [\d.]+ ms, p99 [\d.]+ ms$`)
	if last := lines[len(lines)-1]; !final.MatchString(last) {
		t.Errorf("last line %q does not match %s", last, final)
	}
}

func TestDriveStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	send := func(ctx context.Context) error {
		<-ctx.Done() // a request that hangs until cancelled
		return ctx.Err()
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := drive(ctx, send, phase{Label: "sm 10%", InFlight: 3, Window: time.Minute}, newProgress(nil, 0))
	if err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("drive took %v to notice the cancel", took)
	}
}
