package k8s

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/logs"
)

// follow=true through the real API server: kwok serves each pod's log as
// a kubelet would; the provider keeps the response open and streams the
// log of a pod that starts while it follows, until the client goes away.
func TestLogsFollowOnKubernetes(t *testing.T) {
	requireNodes(t)
	// The follow must outlive a scale-up: the harness's 10 s write
	// timeout ends every response.
	p := startProviderAs(t, "follow", env.cluster.kubeconfig, []string{"write_timeout=2m"})
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)
	p.deploy(t, fn("tailed", 10, "1Gi"))
	p.ready(t, "tailed", 1, 30*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/system/logs?name=tailed&follow=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("logs: %d", resp.StatusCode)
	}
	msgs := make(chan logs.Message)
	ended := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(resp.Body)
		for {
			var m logs.Message
			if err := dec.Decode(&m); err != nil {
				ended <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
			}
		}
	}()
	// next is the next message; the stream ending first fails the test.
	next := func(what string) logs.Message {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case err := <-ended:
			t.Fatalf("%s: the followed stream ended: %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no message", what)
		}
		return logs.Message{}
	}
	instances := map[string]int{}
	for i, want := range functionLog {
		m := next("the first pod's log")
		if m.Text != want || m.Name != "tailed" || m.Namespace != fnNS {
			t.Fatalf("message %d: %+v, want %q", i, m, want)
		}
		instances[m.Instance]++
	}
	first := ""
	for in := range instances {
		first = in
	}

	// A pod that starts while the query follows is streamed too.
	p.scale(t, "tailed", 2)
	for i, want := range functionLog {
		m := next("the new pod's log")
		if m.Text != want || m.Instance == first {
			t.Fatalf("message %d after the scale-up: %+v, want %q from a pod other than %s", i, m, want, first)
		}
	}

	// The client going away ends the stream.
	cancel()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end once the client left")
	}
}
