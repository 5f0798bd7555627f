package k8s

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	k8sbackend "github.com/faas-gpu/faas-gpu/k8s"
)

// basicAuth adds credentials to every request of a provider's client.
type basicAuth struct{ user, password string }

func (a basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(a.user, a.password)
	return http.DefaultTransport.RoundTrip(r)
}

// Two providers with basic auth, each publishing its address as the
// chart does (POD_IP): deploy, scale, update and delete sent to the
// standby are done by the leader, with the caller's credentials; a call
// without them is refused by the standby itself. The load the standby
// proxies reaches the leader's autoscaler: an SLO function invoked only
// through the standby scales up. Without forwarding the standby answers
// 503 to every write; without the load reports the leader sees no traffic.
func TestWritesOnTheStandbyReachTheLeader(t *testing.T) {
	requireNodes(t)
	secrets := t.TempDir()
	for f, v := range map[string]string{"basic-auth-user": "admin", "basic-auth-password": "s3cret"} {
		if err := os.WriteFile(filepath.Join(secrets, f), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fnPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	envs := []string{"POD_IP=127.0.0.1", "basic_auth=true", "secret_mount_path=" + secrets}
	args := []string{"-k8s-function-port", strconv.Itoa(fnPort), "-autoscale-interval", "250ms", "-autoscale-cooldown", "1s"}
	a := startProviderAs(t, "fwd-a", env.cluster.kubeconfig, envs, args...)
	a.http.Transport = basicAuth{"admin", "s3cret"}
	a.leads(t, 10*time.Second)
	b := startProviderAs(t, "fwd-b", env.cluster.kubeconfig, envs, args...)
	b.http.Transport = basicAuth{"admin", "s3cret"}
	watchInvariants(t, a, b)
	defer cleanUp(t, a)

	// The Lease names the leader's address.
	var published string
	if err := poll(10*time.Second, func() bool {
		l, err := env.client.CoordinationV1().Leases(providerNS).Get(context.Background(), "faas-gpu", metav1.GetOptions{})
		if err == nil {
			published = l.Annotations[k8sbackend.AnnotationLeaderURL]
		}
		return published == a.url
	}); err != nil {
		t.Fatalf("Lease annotation %s = %q, want the leader's %q", k8sbackend.AnnotationLeaderURL, published, a.url)
	}

	// Without credentials the standby refuses, and nothing reaches the leader.
	anon := &http.Client{Timeout: 10 * time.Second}
	resp, err := anon.Post(b.url+"/system/functions", "application/json", strings.NewReader(`{"service":"anon","image":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("deploy without credentials on the standby: %d, want 401", resp.StatusCode)
	}

	// Every write sent to the standby.
	start := time.Now()
	b.deploy(t, fn("fwd", 10, "1Gi"))
	t.Logf("deploy through the standby answered in %v", time.Since(start).Round(time.Millisecond))
	if st := a.status(t, "fwd"); st.Replicas != 1 {
		t.Fatalf("the leader's status after a deploy on the standby: %+v", st)
	}
	b.scale(t, "fwd", 2)
	if st := a.status(t, "fwd"); st.Replicas != 2 {
		t.Fatalf("the leader's status after a scale on the standby: %+v", st)
	}
	upd := fn("fwd", 20, "1Gi")
	b.must(t, http.StatusAccepted, http.MethodPut, "/system/functions", upd)
	if err := poll(10*time.Second, func() bool {
		rep := a.gpus(t)
		return len(rep.Functions) == 1 && rep.Functions[0].SMPercent == 20
	}); err != nil {
		t.Fatalf("the leader did not apply the update sent to the standby: %+v", a.gpus(t).Functions)
	}
	b.remove(t, "fwd")
	if code, _ := a.call(t, http.MethodGet, "/system/function/fwd", nil); code != http.StatusNotFound {
		t.Fatalf("the leader still has fwd after a delete on the standby: %d", code)
	}
	if strings.Contains(b.out.String(), "leading: placing replicas") {
		t.Fatal("the standby led; the writes did not go through forwarding")
	}

	// Load through the standby only.
	ann := map[string]string{"com.openfaas.gpu.model": "resnet50", "com.openfaas.gpu.slo": "60ms"}
	cl := fn("classify-b", 0, "")
	cl.Annotations = &ann
	b.deploy(t, cl)
	a.ready(t, "classify-b", 1, 30*time.Second)
	fakePods(t, "classify-b", fnPort, 0)
	stop := loadFunction(anon, b.url+"/function/classify-b", 16, 0)
	start = time.Now()
	err = poll(20*time.Second, func() bool { return a.status(t, "classify-b").Replicas > 1 })
	took := time.Since(start)
	sent := stop()
	if err != nil {
		t.Fatalf("the leader did not scale up on the standby's load: %d requests in %v: %+v", sent, took, a.gpus(t).Functions)
	}
	t.Logf("the leader scaled classify-b to %d replicas %v into load sent only to the standby (%d requests)",
		a.status(t, "classify-b").Replicas, took.Round(time.Millisecond), sent)
}
