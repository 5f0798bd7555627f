package k8s

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The Lease carries its holder's address, written with the holder, so a
// standby never reads one instance's address beside another's identity.
func TestLeaseLockPublishesTheHoldersURL(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	type seen struct{ holder, url string }
	newLock := func(id, url string, got *seen) *leaseLock {
		return &leaseLock{meta: metav1.ObjectMeta{Name: "faas-gpu", Namespace: "openfaas"}, client: client.CoordinationV1(),
			identity: id, url: url, observe: func(rec resourcelock.LeaderElectionRecord, u string) { *got = seen{rec.HolderIdentity, u} }}
	}
	var seenA, seenB, seenC seen
	a := newLock("a", "http://10.0.0.1:8081", &seenA)
	b := newLock("b", "http://10.0.0.2:8081", &seenB)
	c := newLock("c", "", &seenC) // publishes no address
	rec := func(holder string) resourcelock.LeaderElectionRecord {
		return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 2,
			AcquireTime: metav1.NewTime(time.Now()), RenewTime: metav1.NewTime(time.Now())}
	}
	annotation := func() string {
		l, err := client.CoordinationV1().Leases("openfaas").Get(ctx, "faas-gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Annotations[AnnotationLeaderURL]
	}
	steps := []struct {
		what string
		do   func() error
		want string // the annotation after the step
		// read by b after the step
		wantB seen
	}{
		{"a creates the Lease", func() error { return a.Create(ctx, rec("a")) }, "http://10.0.0.1:8081", seen{"a", "http://10.0.0.1:8081"}},
		{"a renews", func() error {
			if _, _, err := a.Get(ctx); err != nil {
				return err
			}
			return a.Update(ctx, rec("a"))
		}, "http://10.0.0.1:8081", seen{"a", "http://10.0.0.1:8081"}},
		{"a releases", func() error { return a.Update(ctx, rec("")) }, "", seen{"", ""}},
		{"c acquires, publishing nothing", func() error {
			if _, _, err := c.Get(ctx); err != nil {
				return err
			}
			return c.Update(ctx, rec("c"))
		}, "", seen{"c", ""}},
		{"b takes over an expired Lease", func() error {
			if _, _, err := b.Get(ctx); err != nil {
				return err
			}
			return b.Update(ctx, rec("b"))
		}, "http://10.0.0.2:8081", seen{"b", "http://10.0.0.2:8081"}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if got := annotation(); got != s.want {
			t.Errorf("%s: annotation %q, want %q", s.what, got, s.want)
		}
		if _, _, err := b.Get(ctx); err != nil {
			t.Fatal(err)
		}
		if seenB != s.wantB {
			t.Errorf("%s: b read %+v, want %+v", s.what, seenB, s.wantB)
		}
	}
}

// A standby sends a write to the leader as it came (method, path, query,
// body, Authorization) and answers what the leader answered; it keeps a
// write when it leads, knows no leader, or the write was forwarded
// already, and answers 503 with Retry-After when the leader is gone.
func TestForwarderSendsWritesToTheLeader(t *testing.T) {
	var got struct {
		method, uri, auth, body, by string
	}
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.method, got.uri, got.auth, got.body, got.by = r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), string(b), r.Header.Get(HeaderForwardedBy)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "from the leader")
	}))
	defer leader.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // an address nobody answers on

	cases := []struct {
		name      string
		url       string
		leading   bool
		forwarded bool
		wantCode  int
		wantBody  string
		wantSent  bool
	}{
		{"standby forwards", leader.URL, false, false, http.StatusAccepted, "from the leader", true},
		{"leader serves", leader.URL, true, false, http.StatusTeapot, "local", false},
		{"no leader known", "", false, false, http.StatusTeapot, "local", false},
		{"already forwarded", leader.URL, false, true, http.StatusTeapot, "local", false},
		{"leader unreachable", gone.URL, false, false, http.StatusServiceUnavailable, "did not answer", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got.method, got.uri = "", ""
			f := &forwarder{self: "standby-1", locate: func() (string, bool) { return c.url, c.leading }, retry: 1500 * time.Millisecond, log: zap.NewNop()}
			h := f.wrap(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusTeapot)
				_, _ = io.WriteString(w, "local")
			})
			req := httptest.NewRequest(http.MethodPut, "/system/functions?namespace=openfaas-fn", strings.NewReader(`{"service":"f"}`))
			req.SetBasicAuth("admin", "secret")
			if c.forwarded {
				req.Header.Set(HeaderForwardedBy, "other")
			}
			rec := httptest.NewRecorder()
			h(rec, req)
			if rec.Code != c.wantCode || !strings.Contains(rec.Body.String(), c.wantBody) {
				t.Fatalf("answer %d %q, want %d containing %q", rec.Code, rec.Body.String(), c.wantCode, c.wantBody)
			}
			if c.wantCode == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") != "2" {
				t.Errorf("Retry-After %q, want 2 (the retry period rounded up)", rec.Header().Get("Retry-After"))
			}
			if sent := got.method != ""; sent != c.wantSent {
				t.Fatalf("sent to the leader: %v, want %v", sent, c.wantSent)
			}
			if !c.wantSent {
				return
			}
			if got.method != http.MethodPut || got.uri != "/system/functions?namespace=openfaas-fn" || got.body != `{"service":"f"}` {
				t.Errorf("the leader got %s %s %q", got.method, got.uri, got.body)
			}
			if want := req.Header.Get("Authorization"); got.auth != want {
				t.Errorf("Authorization %q, want %q as sent", got.auth, want)
			}
			if got.by != "standby-1" {
				t.Errorf("%s %q, want the standby's identity", HeaderForwardedBy, got.by)
			}
		})
	}
}

func TestCheckAdvertiseURL(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"", true}, {"http://10.0.0.1:8081", true}, {"https://faas-gpu.openfaas:8081/", true}, {"http://[fd00::1]:8081", true},
		{"10.0.0.1:8081", false}, {"ftp://h:1", false}, {"http://", false}, {"http://h:1/system", false},
	} {
		err := checkAdvertiseURL(c.in)
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok=%v", c.in, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "-k8s-advertise-url") {
			t.Errorf("%q: error %q does not name the flag", c.in, err)
		}
	}
}

// A standby forwards only to a holder whose Lease it saw renewed within
// the Lease's duration: a leader that died may have left its pod IP to
// another pod.
func TestLeaderURLOnlyWhileTheLeaseHolds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rec := func(holder string, renew time.Time) resourcelock.LeaderElectionRecord {
		return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 2, RenewTime: metav1.NewTime(renew)}
	}
	const url = "http://10.0.0.1:8081"
	steps := []struct {
		what    string
		seen    *resourcelock.LeaderElectionRecord // observed at at, if set
		at      time.Time
		leading bool
		wantURL string
		wantLed bool
	}{
		{"nothing seen", nil, t0, false, "", false},
		{"another holds it", ptr(rec("a", t0)), t0, false, url, false},
		{"within its duration", nil, t0.Add(2 * time.Second), false, url, false},
		{"not renewed past its duration", nil, t0.Add(2*time.Second + time.Millisecond), false, "", false},
		{"renewed again, though its clock lags ours", ptr(rec("a", t0.Add(-time.Minute))), t0.Add(3 * time.Second), false, url, false},
		{"released", ptr(rec("", t0)), t0.Add(3 * time.Second), false, "", false},
		{"held by this instance that stopped leading", ptr(rec("me", t0)), t0.Add(3 * time.Second), false, "", false},
		{"leading", nil, t0.Add(3 * time.Second), true, "http://10.0.0.9:8081", true},
	}
	b := &Backend{identity: "me", cfg: Config{Options: Options{AdvertiseURL: "http://10.0.0.9:8081"}}}
	for _, s := range steps {
		if s.seen != nil {
			b.observeLease(*s.seen, url, s.at)
		}
		b.leading = s.leading
		gotURL, gotLed := b.leaderURLAt(s.at)
		if gotURL != s.wantURL || gotLed != s.wantLed {
			t.Errorf("%s: (%q, %v), want (%q, %v)", s.what, gotURL, gotLed, s.wantURL, s.wantLed)
		}
	}
}
