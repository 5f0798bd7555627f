package handlers

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/gorilla/mux"
	"go.uber.org/zap"
)

func TestParseModelsHeader(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"resnet50,vgg16", []string{"resnet50", "vgg16"}},
		{" resnet50 , vgg16 ", []string{"resnet50", "vgg16"}},
		{"a,,b,", []string{"a", "b"}},
		{"", []string{}},
	}
	for _, tt := range tests {
		if got := ParseModelsHeader(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseModelsHeader(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// reportingResolver is a resolver that is also a ModelReporter, as both
// backends are: what replicas tell comes out on told.
type reportingResolver struct {
	sloResolver
	told chan report
}

type report struct {
	id     string
	models []string
}

func (r reportingResolver) ReplicaModels(id string, models []string) { r.told <- report{id, models} }

func awaitReport(t *testing.T, told chan report) report {
	t.Helper()
	select {
	case r := <-told:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no report from the proxy")
		return report{}
	}
}

// The proxy reads X-Faas-Gpu-Models from a replica's response, tells the
// backend and removes it; it asks GET /_/models of a replica it sees for
// the first time, and a replica that answers 404 there is left alone.
func TestProxyLearnsReplicaModels(t *testing.T) {
	tests := []struct {
		name string
		// header is the replica's X-Faas-Gpu-Models ("" for none);
		// listing its answer to GET /_/models ("" for 404).
		header, listing string
		want            [][]string // reports, in any order
		// mayPrecede is a report that may come before want's, or not: an
		// ask's answer is dropped when a response told newer news first.
		mayPrecede []string
	}{
		{name: "header", header: "vgg16, resnet50", want: [][]string{{"vgg16", "resnet50"}}},
		{name: "listing", listing: `{"models":[{"name":"resnet50","bytes":102760448},{"name":"vgg16"}]}`, want: [][]string{{"resnet50", "vgg16"}}},
		{name: "both: the header is newer", header: "a", listing: `{"models":[{"name":"b"}]}`, want: [][]string{{"a"}}, mayPrecede: []string{"b"}},
		{name: "neither: the assumption stays", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listed := make(chan struct{})
			var once sync.Once
			replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == ModelsPath {
					defer once.Do(func() { close(listed) })
					if tt.listing == "" {
						http.NotFound(w, r)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(tt.listing))
					return
				}
				// Answer once the listing was asked: the ask on first
				// sight does not wait for the request.
				<-listed
				if tt.header != "" {
					w.Header().Set(HeaderModels, tt.header)
				}
			}))
			defer replica.Close()
			res := reportingResolver{sloResolver: sloResolver{urls: map[string]string{"fn": replica.URL}}, told: make(chan report, 4)}
			r := mux.NewRouter()
			r.HandleFunc("/function/{name}", MakeProxyHandler(res, &Invocations{}, ProxyOptions{Timeout: 10 * time.Second}, zap.NewNop()))
			srv := httptest.NewServer(r)
			defer srv.Close()

			resp, err := http.Get(srv.URL + "/function/fn")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if v, ok := resp.Header[HeaderModels]; ok {
				t.Fatalf("the caller got %s: %q", HeaderModels, v)
			}
			var got [][]string
			for range tt.want {
				r := awaitReport(t, res.told)
				if r.id != "fn-0" {
					t.Fatalf("report for %q, want fn-0", r.id)
				}
				if tt.mayPrecede != nil && reflect.DeepEqual(r.models, tt.mayPrecede) {
					r = awaitReport(t, res.told)
				}
				got = append(got, r.models)
			}
			if tt.mayPrecede != nil {
				select {
				case late := <-res.told:
					t.Fatalf("a report after the newest: %q", late.models)
				case <-time.After(200 * time.Millisecond):
				}
			}
			if len(got) == 2 && !reflect.DeepEqual(got[0], tt.want[0]) {
				got[0], got[1] = got[1], got[0]
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("reports = %q, want %q", got, tt.want)
			}
			select {
			case got := <-res.told:
				t.Fatalf("unexpected report %+v", got)
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

// Without a reporter the header is still the provider's: it is removed.
func TestProxyStripsModelsHeaderWithoutReporter(t *testing.T) {
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderModels, "a")
	}))
	defer replica.Close()
	r := mux.NewRouter()
	r.HandleFunc("/function/{name}", MakeProxyHandler(sloResolver{urls: map[string]string{"fn": replica.URL}}, &Invocations{}, ProxyOptions{Timeout: 10 * time.Second}, zap.NewNop()))
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/function/fn")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v, ok := resp.Header[HeaderModels]; ok {
		t.Fatalf("the caller got %s: %q", HeaderModels, v)
	}
}

type countingReporter struct{ n atomic.Int64 }

func (c *countingReporter) ReplicaModels(string, []string) { c.n.Add(1) }

// A replica is asked once when first seen, then after untold responses at
// most once a second.
func TestModelAskerPacesAsks(t *testing.T) {
	var asked atomic.Int64
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte(`{"models":[{"name":"a"}]}`))
	}))
	defer replica.Close()
	rep := &countingReporter{}
	a := newModelAsker(rep, http.DefaultTransport, zap.NewNop())
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	ep := scheduler.Endpoint{ID: "r", URL: replica.URL}
	steps := []struct {
		name    string
		advance time.Duration
		do      func()
		want    int64 // asks so far
	}{
		{"first seen", 0, func() { a.ready([]scheduler.Endpoint{ep}) }, 1},
		{"seen again", 0, func() { a.ready([]scheduler.Endpoint{ep}) }, 1},
		{"untold within the second", 500 * time.Millisecond, func() { a.untold(ep) }, 1},
		{"untold a second later", 600 * time.Millisecond, func() { a.untold(ep) }, 2},
		{"untold again at once", 0, func() { a.untold(ep) }, 2},
		{"untold a new replica", 0, func() { a.untold(scheduler.Endpoint{ID: "s", URL: replica.URL}) }, 3},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		s.do()
		a.asking.Wait()
		if got := asked.Load(); got != s.want {
			t.Fatalf("%s: %d asks, want %d", s.name, got, s.want)
		}
	}
	if got := rep.n.Load(); got != 3 {
		t.Fatalf("%d reports, want 3", got)
	}
}

// loadsReporter keeps load times as well as models (ModelLoadReporter).
type loadsReporter struct {
	countingReporter
	mu    sync.Mutex
	loads map[string]map[string]float64
}

func (l *loadsReporter) ReplicaModelLoads(id string, s map[string]float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loads[id] = s
}

// A replica's load times reach a reporter that keeps them; a header that
// lists other models than the last answer draws an ask (at most once a
// second), the same list does not, and a time that cannot be a load is
// dropped.
func TestModelAskerLearnsLoadTimes(t *testing.T) {
	var asked atomic.Int64
	var answer atomic.Value
	answer.Store(`{"models":[{"name":"a","loadSeconds":1.5}]}`)
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte(answer.Load().(string)))
	}))
	defer replica.Close()
	rep := &loadsReporter{loads: map[string]map[string]float64{}}
	a := newModelAsker(rep, http.DefaultTransport, zap.NewNop())
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	ep := scheduler.Endpoint{ID: "r", URL: replica.URL}
	steps := []struct {
		name      string
		advance   time.Duration
		do        func()
		wantAsks  int64
		wantLoads map[string]float64
	}{
		{"first seen", 0, func() { a.ready([]scheduler.Endpoint{ep}) }, 1, map[string]float64{"a": 1.5}},
		{"header, same list", 2 * time.Second, func() { a.toldNow(ep, []string{"a"}) }, 1, map[string]float64{"a": 1.5}},
		{"header, a new model", 2 * time.Second, func() {
			answer.Store(`{"models":[{"name":"b","loadSeconds":0.25},{"name":"a","loadSeconds":-3}]}`)
			a.toldNow(ep, []string{"b", "a"})
		}, 2, map[string]float64{"b": 0.25}},
		{"header, another list within the second", 500 * time.Millisecond, func() { a.toldNow(ep, []string{"c"}) }, 2, map[string]float64{"b": 0.25}},
		{"header, the list the last answer gave", 2 * time.Second, func() { a.toldNow(ep, []string{"b", "a"}) }, 2, map[string]float64{"b": 0.25}},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		s.do()
		a.asking.Wait()
		if got := asked.Load(); got != s.wantAsks {
			t.Fatalf("%s: %d asks, want %d", s.name, got, s.wantAsks)
		}
		rep.mu.Lock()
		got := rep.loads["r"]
		rep.mu.Unlock()
		if !reflect.DeepEqual(got, s.wantLoads) {
			t.Fatalf("%s: loads %v, want %v", s.name, got, s.wantLoads)
		}
	}
}
