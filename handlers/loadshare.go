package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/openfaas/faas-provider/auth"
	"go.uber.org/zap"
)

// LoadReportPath is where a standby sends the load it proxied to the
// leader (on the provider's own port, behind basic auth).
const LoadReportPath = "/system/faas-gpu/load"

// LeaderLocator says where the leader's provider API is: leading on the
// leader itself, else the leader's address (empty: none known).
type LeaderLocator interface {
	LeaderURL() (url string, leading bool)
}

// LoadReport is a standby's report: the requests of each function it
// proxied since its previous accepted report, and how many wait in its
// proxy now.
type LoadReport struct {
	From      string               `json:"from"`
	Functions []FunctionLoadReport `json:"functions"`
}

// FunctionLoadReport is one function's line of a LoadReport.
type FunctionLoadReport struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Requests  uint64    `json:"requests"`
	Queued    int       `json:"queued"`
	Last      time.Time `json:"last,omitzero"`
}

// LoadShare is the load the leader's autoscaler sees: what its own proxy
// counted (its LoadBook) plus what standbys reported. Reported requests
// are kept apart from the book, so a leader that becomes a standby never
// reports the others' requests as its own.
type LoadShare struct {
	book *LoadBook
	// ttl: a standby's queued requests count this long after its last
	// report; one that stopped reporting is gone or leads.
	ttl time.Duration
	now func() time.Time

	mu       sync.Mutex
	requests map[string]uint64    // function key -> requests reported
	last     map[string]time.Time // function key -> last reported request
	queued   map[string]sourceQueued
}

type sourceQueued struct {
	at  time.Time
	fns map[string]int
}

// NewLoadShare is book plus what standbys report; a standby's queued
// requests are forgotten ttl after its last report.
func NewLoadShare(book *LoadBook, ttl time.Duration) *LoadShare {
	return &LoadShare{book: book, ttl: ttl, now: time.Now,
		requests: map[string]uint64{}, last: map[string]time.Time{}, queued: map[string]sourceQueued{}}
}

// Load is every request of function ns/name any instance proxied, the
// last one's time and the requests waiting in any instance's proxy.
func (s *LoadShare) Load(ns, name string) (requests uint64, last time.Time, queued int) {
	requests, last, queued = s.book.Load(ns, name)
	k := ns + "/" + name
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	requests += s.requests[k]
	if l := s.last[k]; l.After(last) {
		last = l
	}
	for _, src := range s.queued {
		if now.Sub(src.at) <= s.ttl {
			queued += src.fns[k]
		}
	}
	return requests, last, queued
}

// SLO is this instance's SLO counts of function ns/name (LoadBook.SLO):
// standbys do not report theirs, so a leader corrects its model with the
// requests it proxied itself.
func (s *LoadShare) SLO(ns, name string) (served, missed uint64) { return s.book.SLO(ns, name) }

// Models is this instance's counts of function ns/name's requests by
// model and its replicas' model loads (LoadBook.Models): standbys report
// requests without their models, so a leader plans a multi-model
// function's mix from the requests it proxied itself.
func (s *LoadShare) Models(ns, name string) (byModel map[string]uint64, loads uint64) {
	return s.book.Models(ns, name)
}

// Reporting tells whether some standby reported within the ttl: then part
// of every function's count arrives in lumps, once a report interval, and
// a pass that reads counts over a shorter interval (the core's Rise)
// would take each lump for a rise.
func (s *LoadShare) Reporting() bool {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, src := range s.queued {
		if now.Sub(src.at) <= s.ttl {
			return true
		}
	}
	return false
}

// Add counts a standby's report; its queued requests replace the ones it
// reported before.
func (s *LoadShare) Add(rep LoadReport) {
	q := sourceQueued{at: s.now(), fns: map[string]int{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range rep.Functions {
		k := f.Namespace + "/" + f.Name
		s.requests[k] += f.Requests
		if f.Last.After(s.last[k]) {
			s.last[k] = f.Last
		}
		if f.Queued > 0 {
			q.fns[k] += f.Queued
		}
	}
	s.queued[rep.From] = q
}

// Forget drops a deleted function's reported counts (a Forgetter).
func (s *LoadShare) Forget(ns, name string) {
	k := ns + "/" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, k)
	delete(s.last, k)
	for _, src := range s.queued {
		delete(src.fns, k)
	}
}

// notLeader refuses a report sent to an instance that does not lead: the
// sender keeps its counts for the next try, so none are lost at a change
// of leader.
type notLeader struct{}

func (notLeader) Error() string             { return "this instance does not lead; send load to the leader" }
func (notLeader) RetryAfter() time.Duration { return time.Second }

// MakeLoadReportHandler serves POST LoadReportPath on the leader.
func MakeLoadReportHandler(share *LoadShare, leader LeaderLocator) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var rep LoadReport
		if err := decodeBody(w, r, &rep); err != nil {
			writeError(w, err)
			return
		}
		if err := rep.validate(); err != nil {
			writeError(w, err)
			return
		}
		if _, leading := leader.LeaderURL(); !leading {
			writeError(w, notLeader{})
			return
		}
		share.Add(rep)
		w.WriteHeader(http.StatusNoContent)
	}
}

func (rep *LoadReport) validate() error {
	if strings.TrimSpace(rep.From) == "" {
		return badRequest("from", "the reporting instance's identity is required")
	}
	for i, f := range rep.Functions {
		switch {
		case f.Name == "":
			return badRequest(fmt.Sprintf("functions[%d].name", i), "required")
		case f.Namespace == "":
			return badRequest(fmt.Sprintf("functions[%d].namespace", i), "required")
		case strings.Contains(f.Namespace, "/") || strings.Contains(f.Name, "/"):
			return badRequest(fmt.Sprintf("functions[%d]", i), "%q/%q: names have no '/'", f.Namespace, f.Name)
		case f.Queued < 0:
			return badRequest(fmt.Sprintf("functions[%d].queued", i), "%d is negative", f.Queued)
		}
	}
	return nil
}

// snapshot is every function's counts in the book, by namespace/name.
func (b *LoadBook) snapshot() map[string]FunctionLoadReport {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[string]FunctionLoadReport, len(b.fns))
	for k, l := range b.fns {
		ns, name, _ := strings.Cut(k, "/")
		f := FunctionLoadReport{Namespace: ns, Name: name, Requests: l.requests.Load(), Queued: int(l.queued.Load())}
		if t := l.last.Load(); t != 0 {
			f.Last = time.Unix(0, t)
		}
		out[k] = f
	}
	return out
}

// LoadReporter sends, on a standby, the load its proxy counted to the
// leader every tick, so the leader's autoscaler sees the traffic of every
// instance.
type LoadReporter struct {
	Book   *LoadBook
	Leader LeaderLocator
	// From is this instance's identity (its queued requests are kept per
	// sender).
	From   string
	Client *http.Client
	// Creds, when set, authenticate the reports (the provider's own).
	Creds *auth.BasicAuthCredentials
	Log   *zap.Logger

	// sent is what the leader has been told (or what needed no telling:
	// requests counted while this instance led or nobody did).
	sent map[string]uint64
}

// Run reports every tick until ctx ends.
func (r *LoadReporter) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Report(ctx); err != nil && ctx.Err() == nil {
				r.Log.Warn("cannot send the proxied load to the leader; keeping it for the next tick", zap.Error(err))
			}
		}
	}
}

// Report sends one report. Requests the leader has not accepted are sent
// again with the next; requests counted while this instance leads, or
// while no leader is known, are nobody else's to count.
func (r *LoadReporter) Report(ctx context.Context) error {
	now := r.Book.snapshot()
	leader, leading := r.Leader.LeaderURL()
	if leading || leader == "" {
		r.advance(now)
		return nil
	}
	rep := LoadReport{From: r.From, Functions: []FunctionLoadReport{}}
	for k, f := range now {
		// A count below the one sent is a function deleted and deployed
		// again under its name: its book started from zero.
		if sent := r.sent[k]; f.Requests >= sent {
			f.Requests -= sent
		}
		if f.Requests > 0 || f.Queued > 0 {
			rep.Functions = append(rep.Functions, f)
		}
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("load report: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(leader, "/")+LoadReportPath, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("load report to %s: %w", leader, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.Creds != nil {
		req.SetBasicAuth(r.Creds.User, r.Creds.Password)
	}
	client := r.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("load report to %s: %w", leader, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("load report to %s: status %s", leader, resp.Status)
	}
	r.advance(now)
	return nil
}

func (r *LoadReporter) advance(now map[string]FunctionLoadReport) {
	r.sent = make(map[string]uint64, len(now))
	for k, f := range now {
		r.sent[k] = f.Requests
	}
}
