package local

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/logs"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// collect reads ch until it closes, failing if that takes more than d.
func collect(t *testing.T, ch <-chan logs.Message, d time.Duration) []string {
	t.Helper()
	var got []string
	timeout := time.After(d)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, m.Instance+":"+m.Text)
		case <-timeout:
			t.Fatalf("stream not closed after %s; got %q", d, got)
		}
	}
}

func TestLogHubQuery(t *testing.T) {
	h := newLogHub(100)
	for i := range 6 {
		inst := fmt.Sprintf("fn-%d", i%2)
		h.Append("ns", "fn", inst, fmt.Sprintf("line %d", i), t0.Add(time.Duration(i)*time.Second))
	}
	h.Append("ns", "other", "other-0", "not mine", t0)
	h.Append("ns2", "fn", "fn-0", "other namespace", t0)
	since := t0.Add(3 * time.Second)

	tests := []struct {
		name string
		req  logs.Request
		want []string
	}{
		{"all", logs.Request{}, []string{"fn-0:line 0", "fn-1:line 1", "fn-0:line 2", "fn-1:line 3", "fn-0:line 4", "fn-1:line 5"}},
		{"tail", logs.Request{Tail: 2}, []string{"fn-0:line 4", "fn-1:line 5"}},
		{"tail larger than backlog", logs.Request{Tail: 50}, []string{"fn-0:line 0", "fn-1:line 1", "fn-0:line 2", "fn-1:line 3", "fn-0:line 4", "fn-1:line 5"}},
		{"since is inclusive", logs.Request{Since: &since}, []string{"fn-1:line 3", "fn-0:line 4", "fn-1:line 5"}},
		{"instance", logs.Request{Instance: "fn-1"}, []string{"fn-1:line 1", "fn-1:line 3", "fn-1:line 5"}},
		{"instance, since and tail", logs.Request{Instance: "fn-0", Since: &since, Tail: 1}, []string{"fn-0:line 4"}},
		{"unknown function", logs.Request{Name: "nope"}, nil},
		{"other namespace", logs.Request{Namespace: "ns2"}, []string{"fn-0:other namespace"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			if req.Name == "" {
				req.Name = "fn"
			}
			if req.Namespace == "" {
				req.Namespace = "ns"
			}
			ch, err := h.Query(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := collect(t, ch, time.Second); !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestLogHubRingBound(t *testing.T) {
	h := newLogHub(5)
	for i := range 12 {
		h.Append("ns", "fn", "fn-0", fmt.Sprint(i), t0.Add(time.Duration(i)))
	}
	ch, _ := h.Query(context.Background(), logs.Request{Name: "fn", Namespace: "ns"})
	want := []string{"fn-0:7", "fn-0:8", "fn-0:9", "fn-0:10", "fn-0:11"}
	if got := collect(t, ch, time.Second); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLogHubFollow(t *testing.T) {
	h := newLogHub(10)
	h.Append("ns", "fn", "fn-0", "before", t0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := h.Query(ctx, logs.Request{Name: "fn", Namespace: "ns", Instance: "fn-0", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatal("stream closed early")
			}
			if m.Name != "fn" || m.Namespace != "ns" {
				t.Errorf("message %+v", m)
			}
			return m.Text
		case <-time.After(time.Second):
			t.Fatal("no message")
		}
		return ""
	}
	if got := next(); got != "before" {
		t.Fatalf("backlog: %q", got)
	}
	h.Append("ns", "fn", "fn-1", "other instance", t0)
	h.Append("ns", "fn", "fn-0", "after", t0)
	if got := next(); got != "after" {
		t.Fatalf("followed: %q", got)
	}
	cancel()
	if got := collect(t, ch, time.Second); len(got) != 0 {
		t.Errorf("after cancel: %q", got)
	}
}

func TestLogHubFollowBeforeFirstLineAndForget(t *testing.T) {
	h := newLogHub(10)
	ch, _ := h.Query(context.Background(), logs.Request{Name: "fn", Namespace: "ns", Follow: true})
	h.Append("ns", "fn", "fn-0", "first", t0)
	h.Forget("ns", "fn")
	if got := collect(t, ch, time.Second); !slices.Equal(got, []string{"fn-0:first"}) {
		t.Errorf("got %q", got)
	}
	ch, _ = h.Query(context.Background(), logs.Request{Name: "fn", Namespace: "ns"})
	if got := collect(t, ch, time.Second); len(got) != 0 {
		t.Errorf("after Forget: %q", got)
	}
}

func TestLogHubSlowFollowerDoesNotBlockAppend(t *testing.T) {
	h := newLogHub(100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Never read.
	if _, err := h.Query(ctx, logs.Request{Name: "fn", Namespace: "ns", Follow: true}); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			h.Append("ns", "fn", "fn-0", fmt.Sprint(i), t0)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Append blocked on a follower that does not read")
	}
	if d := h.Dropped(); d == 0 || d > n {
		t.Errorf("dropped %d of %d", d, n)
	}
}

func TestLogHubCancelledFollowerIsForgotten(t *testing.T) {
	h := newLogHub(10)
	ctx, cancel := context.WithCancel(context.Background())
	ch, _ := h.Query(ctx, logs.Request{Name: "ghost", Namespace: "ns", Follow: true})
	cancel()
	collect(t, ch, time.Second)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.funcs) != 0 {
		t.Errorf("a follow query left %d entries behind", len(h.funcs))
	}
}
