package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// AnnotationLeaderURL, on the election Lease, is the address the holder
// serves the provider API on: standbys forward writes and send their load
// there.
const AnnotationLeaderURL = "faas-gpu.openfaas.com/leader-url"

// HeaderForwardedBy marks a request a standby forwarded, with the
// standby's identity. An instance never forwards such a request again: a
// Lease read just before a change of leader could otherwise send a write
// round in circles between two standbys.
const HeaderForwardedBy = "X-Faas-Gpu-Forwarded-By"

// leaseLock is the election's Lease, as client-go's LeaseLock keeps it,
// with the holder's address in an annotation written in the same Update
// as the holder's identity. A separate annotation patched by the leader
// would be a second write that can lag the Lease or outlive the holder;
// here the address on the Lease always belongs to its holder, and a
// release (empty holder) removes it.
type leaseLock struct {
	meta     metav1.ObjectMeta
	client   coordinationv1client.LeasesGetter
	identity string
	url      string // this instance's address; empty: not published
	// observe is told the election record and the holder's address at
	// every read or write of the Lease (every retry period on a standby).
	observe func(rec resourcelock.LeaderElectionRecord, url string)
	lease   *coordinationv1.Lease
}

var _ resourcelock.Interface = (*leaseLock)(nil)

func (l *leaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	lease, err := l.client.Leases(l.meta.Namespace).Get(ctx, l.meta.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.lease = lease
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(*rec)
	if err != nil {
		return nil, nil, fmt.Errorf("lease %s: encode record: %w", l.Describe(), err)
	}
	l.observe(*rec, lease.Annotations[AnnotationLeaderURL])
	return rec, raw, nil
}

func (l *leaseLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.meta.Name, Namespace: l.meta.Namespace},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&ler),
	}
	l.annotate(lease, ler.HolderIdentity)
	created, err := l.client.Leases(l.meta.Namespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.lease = created
	l.observe(ler, created.Annotations[AnnotationLeaderURL])
	return nil
}

func (l *leaseLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.lease == nil {
		return fmt.Errorf("lease %s: not read yet", l.Describe())
	}
	lease := l.lease.DeepCopy()
	lease.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&ler)
	l.annotate(lease, ler.HolderIdentity)
	updated, err := l.client.Leases(l.meta.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = updated
	l.observe(ler, updated.Annotations[AnnotationLeaderURL])
	return nil
}

// annotate sets the address when this instance holds the Lease and
// removes it otherwise (a release writes an empty holder).
func (l *leaseLock) annotate(lease *coordinationv1.Lease, holder string) {
	if holder == l.identity && l.url != "" {
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[AnnotationLeaderURL] = l.url
		return
	}
	delete(lease.Annotations, AnnotationLeaderURL)
}

func (l *leaseLock) RecordEvent(string) {}
func (l *leaseLock) Identity() string   { return l.identity }
func (l *leaseLock) Describe() string   { return l.meta.Namespace + "/" + l.meta.Name }

// observeLease keeps what the Lease last said: who holds it, where, and
// until when this instance may believe it. As client-go's elector does,
// the Lease counts from when this instance saw its renewal change, not
// from the renewal's own time (the clocks of two machines differ).
func (b *Backend) observeLease(rec resourcelock.LeaderElectionRecord, url string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if rec.HolderIdentity != b.lease.holder || !rec.RenewTime.Equal(&b.lease.renew) {
		b.lease.seen = now
	}
	b.lease.holder, b.lease.url, b.lease.renew = rec.HolderIdentity, url, rec.RenewTime
	b.lease.valid = time.Duration(rec.LeaseDurationSeconds) * time.Second
}

// LeaderURL is where writes go: leading is true on the leader itself;
// otherwise url is the leader's published address, empty when no leader
// is known or it published none.
func (b *Backend) LeaderURL() (url string, leading bool) { return b.leaderURLAt(time.Now()) }

func (b *Backend) leaderURLAt(now time.Time) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leading {
		return b.cfg.AdvertiseURL, true
	}
	if b.lease.holder == "" || b.lease.holder == b.identity {
		return "", false
	}
	// A Lease not renewed in time belongs to a leader that died: its pod
	// IP may already be another pod's, which must not get the callers'
	// credentials.
	if now.Sub(b.lease.seen) > b.lease.valid {
		return "", false
	}
	return b.lease.url, false
}

// Identity is this instance's name in the Lease.
func (b *Backend) Identity() string { return b.identity }

// ForwardWrites wraps a write handler (deploy, update, delete, scale): on
// a standby that knows the leader's address, the request goes there as
// it came, Authorization header included, and the leader's answer comes
// back; otherwise next handles it (and a standby refuses it, 503 with
// Retry-After).
func (b *Backend) ForwardWrites(next http.HandlerFunc) http.HandlerFunc {
	return (&forwarder{self: b.identity, locate: b.LeaderURL, retry: b.cfg.RetryPeriod, log: b.log}).wrap(next)
}

// forwarder is ForwardWrites without the Backend, for tests.
type forwarder struct {
	self   string
	locate func() (url string, leading bool)
	retry  time.Duration
	log    *zap.Logger
	// transport is the leader connection's; nil: http.DefaultTransport.
	transport http.RoundTripper
}

func (f *forwarder) wrap(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		leader, leading := f.locate()
		if leading || leader == "" || r.Header.Get(HeaderForwardedBy) != "" {
			next(w, r)
			return
		}
		target, err := url.Parse(leader)
		if err != nil || target.Host == "" {
			// The address is the leader's flag, checked when it started; a
			// Lease edited by hand could still hold anything.
			f.log.Warn("the Lease's leader address is not a URL; not forwarding", zap.String("url", leader), zap.Error(err))
			next(w, r)
			return
		}
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.SetXForwarded()
				pr.Out.Header.Set(HeaderForwardedBy, f.self)
			},
			Transport: f.transport,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				f.log.Warn("cannot forward a write to the leader", zap.String("leader", leader), zap.String("path", r.URL.Path), zap.Error(err))
				// The leader may be gone: by the retry the Lease names the next.
				secs := max(int(math.Ceil(f.retry.Seconds())), 1)
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				http.Error(w, fmt.Sprintf("%v (the leader at %s did not answer: %v)", ErrStandby, leader, err), http.StatusServiceUnavailable)
			},
		}
		rp.ServeHTTP(w, r)
	}
}

// checkAdvertiseURL accepts an absolute http or https URL with a host and
// no path: forwarded requests keep their own path.
func checkAdvertiseURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("-k8s-advertise-url: %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("-k8s-advertise-url: %q is not http(s)://host:port", s)
	}
	return nil
}
