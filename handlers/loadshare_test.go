package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/auth"
	"go.uber.org/zap"
)

type fakeLeader struct {
	mu      sync.Mutex
	url     string
	leading bool
}

func (f *fakeLeader) LeaderURL() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.url, f.leading
}

func (f *fakeLeader) set(url string, leading bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.url, f.leading = url, leading
}

func TestLoadShareSumsTheInstances(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	book := NewLoadBook()
	share := NewLoadShare(book, 3*time.Second)
	share.now = func() time.Time { return now }
	book.Request("openfaas-fn", "f", t0)
	book.Request("openfaas-fn", "f", t0)
	book.SetQueued("openfaas-fn", "f", 1)

	type want struct {
		requests uint64
		last     time.Time
		queued   int
	}
	steps := []struct {
		what string
		do   func()
		want want
	}{
		{"own counts only", func() {}, want{2, t0, 1}},
		{"a standby reports", func() {
			share.Add(LoadReport{From: "b", Functions: []FunctionLoadReport{{Namespace: "openfaas-fn", Name: "f", Requests: 5, Queued: 2, Last: t0.Add(time.Second)}}})
		}, want{7, t0.Add(time.Second), 3}},
		{"another standby reports", func() {
			share.Add(LoadReport{From: "c", Functions: []FunctionLoadReport{{Namespace: "openfaas-fn", Name: "f", Requests: 1, Queued: 4, Last: t0.Add(-time.Second)}}})
		}, want{8, t0.Add(time.Second), 7}},
		{"b's next report replaces its queued, adds its requests", func() {
			share.Add(LoadReport{From: "b", Functions: []FunctionLoadReport{{Namespace: "openfaas-fn", Name: "f", Requests: 1, Last: t0.Add(time.Second)}}})
		}, want{9, t0.Add(time.Second), 5}},
		{"c silent past the ttl: its queued no longer count", func() { now = t0.Add(4 * time.Second) }, want{9, t0.Add(time.Second), 1}},
		{"delete forgets the reports", func() { share.Forget("openfaas-fn", "f"); book.Forget("openfaas-fn", "f") }, want{0, time.Time{}, 0}},
	}
	for _, s := range steps {
		s.do()
		r, l, q := share.Load("openfaas-fn", "f")
		if got := (want{r, l, q}); got.requests != s.want.requests || !got.last.Equal(s.want.last) || got.queued != s.want.queued {
			t.Errorf("%s: %+v, want %+v", s.what, got, s.want)
		}
	}
	if r, _, _ := share.Load("openfaas-fn", "other"); r != 0 {
		t.Errorf("another function got %d requests", r)
	}
}

func TestLoadReportHandler(t *testing.T) {
	cases := []struct {
		name      string
		body      string
		leading   bool
		wantCode  int
		wantInMsg string
		wantReqs  uint64
	}{
		{"accepted", `{"from":"b","functions":[{"namespace":"ns","name":"f","requests":4,"queued":1}]}`, true, http.StatusNoContent, "", 4},
		{"no sender", `{"functions":[]}`, true, http.StatusBadRequest, "from", 0},
		{"no name", `{"from":"b","functions":[{"namespace":"ns","requests":4}]}`, true, http.StatusBadRequest, "functions[0].name", 0},
		{"no namespace", `{"from":"b","functions":[{"name":"f"}]}`, true, http.StatusBadRequest, "functions[0].namespace", 0},
		{"negative queued", `{"from":"b","functions":[{"namespace":"ns","name":"f","queued":-1}]}`, true, http.StatusBadRequest, "functions[0].queued", 0},
		{"not json", `{`, true, http.StatusBadRequest, "body", 0},
		{"sent to a standby", `{"from":"b","functions":[{"namespace":"ns","name":"f","requests":4}]}`, false, http.StatusServiceUnavailable, "does not lead", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			share := NewLoadShare(NewLoadBook(), time.Minute)
			h := MakeLoadReportHandler(share, &fakeLeader{leading: c.leading})
			rec := httptest.NewRecorder()
			h(rec, httptest.NewRequest(http.MethodPost, LoadReportPath, strings.NewReader(c.body)))
			if rec.Code != c.wantCode || !strings.Contains(rec.Body.String(), c.wantInMsg) {
				t.Fatalf("%d %q, want %d naming %q", rec.Code, rec.Body.String(), c.wantCode, c.wantInMsg)
			}
			if c.wantCode == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
			if r, _, _ := share.Load("ns", "f"); r != c.wantReqs {
				t.Errorf("leader counts %d requests, want %d", r, c.wantReqs)
			}
		})
	}
}

// A standby sends what it proxied since the leader last accepted a
// report, authenticated; a refused report is sent again with the next;
// what it counted while leading is not sent.
func TestLoadReporterSendsWhatTheLeaderHasNotCounted(t *testing.T) {
	creds := &auth.BasicAuthCredentials{User: "admin", Password: "pw"}
	leaderShare := NewLoadShare(NewLoadBook(), time.Minute)
	leaderSide := &fakeLeader{leading: true}
	srv := httptest.NewServer(auth.DecorateWithBasicAuth(MakeLoadReportHandler(leaderShare, leaderSide), creds))
	defer srv.Close()

	book := NewLoadBook()
	here := &fakeLeader{}
	rep := &LoadReporter{Book: book, Leader: here, From: "standby", Client: srv.Client(), Creds: creds, Log: zap.NewNop()}
	ctx := context.Background()
	request := func(n int) {
		for range n {
			book.Request("ns", "f", time.Now())
		}
	}
	steps := []struct {
		what    string
		do      func()
		wantErr bool
		want    uint64 // the leader's count of ns/f after the report
	}{
		{"led itself: nothing to send", func() { here.set("", true); request(3) }, false, 0},
		{"standby: sends the new ones", func() { here.set(srv.URL, false); request(2) }, false, 2},
		{"again: only what is new", func() { request(1) }, false, 3},
		{"leader refuses (stepped down)", func() { leaderSide.set("", false); request(4) }, true, 3},
		{"next report carries the refused ones", func() { leaderSide.set("", true); request(1) }, false, 8},
		{"nothing new", func() {}, false, 8},
		{"wrong credentials are refused", func() { rep.Creds = &auth.BasicAuthCredentials{User: "admin", Password: "no"}; request(1) }, true, 8},
	}
	for _, s := range steps {
		s.do()
		err := rep.Report(ctx)
		if (err != nil) != s.wantErr {
			t.Fatalf("%s: error %v, want error %v", s.what, err, s.wantErr)
		}
		if got, _, _ := leaderShare.Load("ns", "f"); got != s.want {
			t.Fatalf("%s: leader counts %d, want %d", s.what, got, s.want)
		}
	}
}

// Reporting is true while a standby's report is fresh, so the leader can
// leave out its short rise pass, which would read each report's lump of
// requests as a rise.
func TestLoadShareReporting(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	share := NewLoadShare(NewLoadBook(), 3*time.Second)
	share.now = func() time.Time { return now }
	if share.Reporting() {
		t.Fatal("reporting before any report")
	}
	share.Add(LoadReport{From: "standby-1", Functions: []FunctionLoadReport{{Namespace: "openfaas-fn", Name: "f", Requests: 40}}})
	if !share.Reporting() {
		t.Fatal("not reporting right after a report")
	}
	now = t0.Add(4 * time.Second)
	if share.Reporting() {
		t.Fatal("still reporting 4 s after the last report, with a 3 s ttl")
	}
}

// The leader plans a multi-model function's mix from the requests by
// model it proxied itself: a standby's report carries no models and
// changes none of them.
func TestLoadShareModelsAreTheLeadersOwn(t *testing.T) {
	book := NewLoadBook()
	share := NewLoadShare(book, time.Minute)
	book.RequestModel("openfaas-fn", "zoo", "vgg16")
	book.RequestModel("openfaas-fn", "zoo", "vgg16")
	book.RequestModel("openfaas-fn", "zoo", "alexnet")
	book.Loaded("openfaas-fn", "zoo")
	share.Add(LoadReport{From: "b", Functions: []FunctionLoadReport{{Namespace: "openfaas-fn", Name: "zoo", Requests: 50}}})
	byModel, loads := share.Models("openfaas-fn", "zoo")
	if byModel["vgg16"] != 2 || byModel["alexnet"] != 1 || len(byModel) != 2 || loads != 1 {
		t.Fatalf("Models = %v, %d loads; want vgg16 2, alexnet 1 and 1 load", byModel, loads)
	}
}
