package handlers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// fakeReplicas stands in for a backend: replicas with fixed models, each
// running one request at a time (batch 1).
type fakeReplicas struct {
	eps   []scheduler.Endpoint
	holds map[string]string // replica -> model
}

func (f *fakeReplicas) Route(ns, name, _ string) (scheduler.Route, error) {
	return scheduler.Route{Endpoints: f.eps}, nil
}
func (f *fakeReplicas) Replicas(ns, name string) ([]scheduler.Endpoint, error) { return f.eps, nil }
func (f *fakeReplicas) Holds(id, model string) bool                            { return f.holds[id] == model }

// TestOutOfOrderDispatch: both replicas busy; a request for x (held by
// nobody) queues before one for y (held by A). When A frees, out-of-order
// dispatch runs the y request there at once; in order, A takes the x
// request and loads x.
func TestOutOfOrderDispatch(t *testing.T) {
	for _, o3 := range []bool{true, false} {
		f := &fakeReplicas{
			eps:   []scheduler.Endpoint{{ID: "A", InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}, {ID: "B", InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}},
			holds: map[string]string{"A": "y"},
		}
		d := newDispatcher(f, NewLoadBook(), nil, true, 2, o3, 0)
		q := d.queueOf("ns", "fn")
		d.poll = time.Hour // only releases hand out replicas here
		ctx := context.Background()
		eps := f.eps
		a, _ := d.acquire(ctx, q, "z", 0, eps, time.Now())
		b, _ := d.acquire(ctx, q, "z", 0, eps, time.Now())
		if a.ID == b.ID {
			t.Fatal("two requests on one replica while another was free")
		}
		got := map[string]chan string{"x": make(chan string, 1), "y": make(chan string, 1)}
		for _, m := range []string{"x", "y"} {
			eps := f.eps
			go func() {
				ep, err := d.acquire(ctx, q, m, 0, eps, time.Now())
				if err != nil {
					t.Error(err)
				}
				got[m] <- ep.ID
			}()
			// queue x strictly before y
			for deadline := time.Now().Add(time.Second); ; {
				q.mu.Lock()
				n := len(q.queue)
				q.mu.Unlock()
				if (m == "x" && n == 1) || (m == "y" && n == 2) || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		var epA scheduler.Endpoint
		for _, ep := range []scheduler.Endpoint{a, b} {
			if ep.ID == "A" {
				epA = ep
			}
		}
		d.release(q, epA)
		want := map[bool]string{true: "y", false: "x"}[o3]
		select {
		case id := <-got[want]:
			if id != "A" {
				t.Fatalf("o3=%v: the %s request ran on %s, want A", o3, want, id)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("o3=%v: A did not take the %s request", o3, want)
		}
	}
}

// TestDispatcherReportsItsQueue: with the one replica busy, requests that
// queue are counted in the load book one by one, and the count falls back
// to 0 as the replica takes them.
func TestDispatcherReportsItsQueue(t *testing.T) {
	o := &fakeReplicas{
		eps:   []scheduler.Endpoint{{ID: "A", InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}},
		holds: map[string]string{"A": "x"},
	}
	book := NewLoadBook()
	d := newDispatcher(o, book, nil, true, 2, true, 0)
	q := d.queueOf("ns", "fn")
	d.poll = time.Hour // only releases hand out the replica here
	ctx := context.Background()
	eps := o.eps
	last := func() string {
		_, _, q := book.Load("ns", "fn")
		return fmt.Sprintf("ns/fn=%d", q)
	}
	first, err := d.acquire(ctx, q, "x", 0, eps, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := last(); got != "ns/fn=0" {
		t.Fatalf("a request that runs at once queued: %q", got)
	}
	granted := make(chan scheduler.Endpoint, 2)
	for i := 1; i <= 2; i++ {
		go func() {
			ep, err := d.acquire(ctx, q, "x", 0, eps, time.Now())
			if err != nil {
				t.Error(err)
			}
			granted <- ep
		}()
		want := fmt.Sprintf("ns/fn=%d", i)
		for deadline := time.Now().Add(2 * time.Second); last() != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after %d queued, last report %q, want %q", i, last(), want)
			}
		}
	}
	d.release(q, first)
	d.release(q, <-granted)
	<-granted
	if got := last(); got != "ns/fn=0" {
		t.Fatalf("queue drained, last report %q, want ns/fn=0", got)
	}
}

// TestDispatcherServesOnTimeRequestsFirst: with the one replica busy, a
// request that has waited past what its SLO allows (scheduler.LateAfter)
// queues before one that can still meet it. The replica, when it frees,
// takes the on-time one; the late one is still served, next.
func TestDispatcherServesOnTimeRequestsFirst(t *testing.T) {
	tests := []struct {
		name     string
		model    string // both requests'
		locality bool
	}{
		{"one model", "", false},
		// An X-Model queue keeps the locality rules and is ordered so too.
		{"X-Model, locality rules", "x", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Batch 1 at 10 req/s: 100 ms a request, so with a 1-s SLO a
			// request that has waited 900 ms is late.
			f := &fakeReplicas{eps: []scheduler.Endpoint{{ID: "A", InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}}, holds: map[string]string{"A": "x"}}
			d := newDispatcher(f, NewLoadBook(), nil, tt.locality, 2, tt.locality, 0)
			q := d.queueOf("ns", "fn")
			d.poll = time.Hour // only releases hand out the replica here
			ctx := context.Background()
			slo := time.Second
			first, err := d.acquire(ctx, q, tt.model, slo, f.eps, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			order := make(chan string, 2)
			granted := make(chan scheduler.Endpoint, 2)
			for i, req := range []struct {
				name  string
				start time.Time
			}{{"late", time.Now().Add(-2 * time.Second)}, {"on time", time.Now()}} {
				go func() {
					ep, err := d.acquire(ctx, q, tt.model, slo, f.eps, req.start)
					if err != nil {
						t.Error(err)
					}
					order <- req.name
					granted <- ep
				}()
				for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) { // queue late strictly first
					q.mu.Lock()
					n := len(q.queue)
					q.mu.Unlock()
					if n == i+1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s request did not queue", req.name)
					}
				}
			}
			d.release(q, first)
			if got := <-order; got != "on time" {
				t.Errorf("the freed replica took the %s request, want the on-time one", got)
			}
			d.release(q, <-granted)
			select {
			case got := <-order:
				if got != "late" {
					t.Errorf("second grant went to %s", got)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the late request was never served")
			}
			d.release(q, <-granted)
		})
	}
}

// timedReplicas is a fakeReplicas whose backend knows its models' load
// times (ModelLoadTimer).
type timedReplicas struct {
	fakeReplicas
	load float64
}

func (f *timedReplicas) ModelLoadSeconds(string) float64 { return f.load }

// TestDispatcherWeighsAHolderAgainstALoad: A holds x and is busy (10
// req/s: 0.1 s to free), B is free. Where the backend knows x's load time,
// a request for x waits for A only while A would serve it sooner than B
// could load x; without it, the locality bound keeps it waiting.
func TestDispatcherWeighsAHolderAgainstALoad(t *testing.T) {
	tests := []struct {
		name     string
		resolver ReplicaResolver
		want     string // the replica it runs on
	}{
		{"no load times: waits for the holder", &fakeReplicas{}, "A"},
		{"a load slower than the wait: waits", &timedReplicas{load: 5}, "A"},
		{"a load sooner than the wait: loads on B", &timedReplicas{load: 0.05}, "B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := []scheduler.Endpoint{{ID: "A", InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}, {ID: "B", InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}}
			holds := map[string]string{"A": "x"}
			switch f := tt.resolver.(type) {
			case *fakeReplicas:
				f.eps, f.holds = eps, holds
			case *timedReplicas:
				f.eps, f.holds = eps, holds
			}
			d := newDispatcher(tt.resolver, NewLoadBook(), nil, true, 2, true, 0)
			q := d.queueOf("ns", "fn")
			d.poll = time.Hour // only releases hand out replicas here
			ctx := context.Background()
			eps[0].InFlight.Store(1) // A is busy
			got := make(chan string, 1)
			go func() {
				ep, err := d.acquire(ctx, q, "x", 0, eps, time.Now())
				if err != nil {
					t.Error(err)
				}
				got <- ep.ID
			}()
			select {
			case id := <-got:
				if id != tt.want {
					t.Fatalf("ran on %s at once, want %s", id, tt.want)
				}
				return
			case <-time.After(100 * time.Millisecond):
			}
			d.release(q, eps[0])
			select {
			case id := <-got:
				if id != tt.want {
					t.Fatalf("ran on %s once A freed, want %s", id, tt.want)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("never ran")
			}
		})
	}
}
