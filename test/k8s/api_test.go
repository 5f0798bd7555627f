package k8s

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The rest of the provider API on Kubernetes: /system/info, secrets as
// Kubernetes Secrets (409 on a duplicate), namespaces labelled openfaas=1,
// logs, and the 404s and 400s faas-cli and the gateway rely on.
func TestSecretsNamespacesLogsAndErrors(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "api")
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)
	ctx := context.Background()

	var info types.ProviderInfo
	if err := json.Unmarshal(p.must(t, http.StatusOK, http.MethodGet, "/system/info", nil), &info); err != nil || info.Orchestration != "kubernetes" || info.Name != "faas-gpu" {
		t.Errorf("info: %+v %v", info, err)
	}

	t.Run("secrets", func(t *testing.T) {
		p.must(t, http.StatusAccepted, http.MethodPost, "/system/secrets", types.Secret{Name: "db-pass", Value: "one"})
		if code, body := p.call(t, http.MethodPost, "/system/secrets", types.Secret{Name: "db-pass", Value: "two"}); code != http.StatusConflict {
			t.Errorf("duplicate secret: %d %s, want 409", code, body)
		}
		p.must(t, http.StatusAccepted, http.MethodPut, "/system/secrets", types.Secret{Name: "db-pass", RawValue: []byte{0, 1, 2}})
		sec, err := env.client.CoreV1().Secrets(fnNS).Get(ctx, "db-pass", metav1.GetOptions{})
		if err != nil || string(sec.Data["db-pass"]) != "\x00\x01\x02" || sec.Labels["app.kubernetes.io/managed-by"] != "openfaas" {
			t.Errorf("secret in the cluster: %+v %v", sec, err)
		}
		var list []types.Secret
		if err := poll(5*time.Second, func() bool {
			_ = json.Unmarshal(p.must(t, http.StatusOK, http.MethodGet, "/system/secrets", nil), &list)
			return len(list) == 1
		}); err != nil || list[0].Name != "db-pass" || list[0].Value != "" || len(list[0].RawValue) != 0 {
			t.Errorf("secret list: %+v", list)
		}
		if code, _ := p.call(t, http.MethodPut, "/system/secrets", types.Secret{Name: "nope", Value: "x"}); code != http.StatusNotFound {
			t.Errorf("update of a missing secret: %d, want 404", code)
		}
		p.must(t, http.StatusAccepted, http.MethodDelete, "/system/secrets", types.Secret{Name: "db-pass"})
		if code, _ := p.call(t, http.MethodDelete, "/system/secrets", types.Secret{Name: "db-pass"}); code != http.StatusNotFound {
			t.Errorf("second secret delete: %d, want 404", code)
		}
		f := fn("needs-secret", 10, "1Gi")
		f.Secrets = []string{"db-pass"}
		if code, body := p.call(t, http.MethodPost, "/system/functions", f); code != http.StatusBadRequest {
			t.Errorf("deploy with a missing secret: %d %s, want 400", code, body)
		}
	})

	t.Run("namespaces", func(t *testing.T) {
		p.must(t, http.StatusCreated, http.MethodPost, "/system/namespace/team-a", types.FunctionNamespace{Name: "team-a", Labels: map[string]string{"owner": "vision"}})
		ns, err := env.client.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{})
		if err != nil || ns.Labels["openfaas"] != "1" || ns.Labels["owner"] != "vision" {
			t.Fatalf("namespace in the cluster: %+v %v", ns, err)
		}
		if code, _ := p.call(t, http.MethodPost, "/system/namespace/team-a", types.FunctionNamespace{Name: "team-a"}); code != http.StatusConflict {
			t.Errorf("duplicate namespace: %d, want 409", code)
		}
		var names []string
		if err := poll(5*time.Second, func() bool {
			_ = json.Unmarshal(p.must(t, http.StatusOK, http.MethodGet, "/system/namespaces", nil), &names)
			return len(names) == 2
		}); err != nil || names[0] != fnNS || names[1] != "team-a" {
			t.Fatalf("namespaces: %v, want the default first, then team-a", names)
		}
		f := fn("teamfn", 10, "1Gi")
		f.Namespace = "team-a"
		p.deploy(t, f)
		p.must(t, http.StatusOK, http.MethodGet, "/system/function/teamfn?namespace=team-a", nil)
		if code, _ := p.call(t, http.MethodDelete, "/system/namespace/team-a", nil); code != http.StatusBadRequest {
			t.Errorf("deleting a namespace with functions: %d, want 400", code)
		}
		p.must(t, http.StatusAccepted, http.MethodDelete, "/system/functions?namespace=team-a", types.DeleteFunctionRequest{FunctionName: "teamfn"})
		if err := poll(10*time.Second, func() bool {
			code, _ := p.call(t, http.MethodDelete, "/system/namespace/team-a", nil)
			return code == http.StatusAccepted
		}); err != nil {
			t.Errorf("namespace not deleted once empty")
		}
		f.Namespace = "kube-system"
		if code, _ := p.call(t, http.MethodPost, "/system/functions", f); code != http.StatusBadRequest {
			t.Errorf("deploy into a namespace not labelled openfaas=1: %d, want 400", code)
		}
	})

	t.Run("logs and errors", func(t *testing.T) {
		p.deploy(t, fn("logger", 10, "1Gi"))
		p.ready(t, "logger", 1, 30*time.Second)
		// kwok serves the pod's log (functionLog) as a kubelet would,
		// through the API server.
		start := time.Now()
		resp, err := http.Get(p.url + "/system/logs?name=logger&follow=false")
		if err != nil {
			t.Fatal(err)
		}
		var msgs []logs.Message
		dec := json.NewDecoder(resp.Body)
		for {
			var m logs.Message
			if err := dec.Decode(&m); err != nil {
				break
			}
			msgs = append(msgs, m)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || time.Since(start) > 5*time.Second || len(msgs) != len(functionLog) {
			t.Fatalf("logs: %d after %v: %+v", resp.StatusCode, time.Since(start), msgs)
		}
		for i, m := range msgs {
			if m.Text != functionLog[i] || m.Name != "logger" || m.Namespace != fnNS || !strings.HasPrefix(m.Instance, "logger-") || m.Timestamp.Year() != 2026 {
				t.Errorf("log message %d: %+v", i, m)
			}
		}
		// Someone else's Service of the function's name is never taken over.
		foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: fnNS},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "other"}}}
		if _, err := env.client.CoreV1().Services(fnNS).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer env.client.CoreV1().Services(fnNS).Delete(ctx, "taken", metav1.DeleteOptions{}) //nolint:errcheck
		for _, c := range []struct {
			method, path string
			body         any
			want         int
		}{
			{http.MethodGet, "/system/function/nope", nil, http.StatusNotFound},
			{http.MethodPost, "/system/scale-function/nope", types.ScaleServiceRequest{ServiceName: "nope", Replicas: 1}, http.StatusNotFound},
			{http.MethodDelete, "/system/functions", types.DeleteFunctionRequest{FunctionName: "nope"}, http.StatusNotFound},
			{http.MethodGet, "/system/logs?name=nope", nil, http.StatusNotFound},
			{http.MethodPost, "/system/functions", fn("logger", 10, "1Gi"), http.StatusConflict},
			{http.MethodPost, "/system/functions", fn("huge", 10, "32Gi"), http.StatusBadRequest},
			{http.MethodGet, "/system/functions?namespace=nowhere", nil, http.StatusBadRequest},
			{http.MethodPost, "/system/functions", fn("taken", 10, "1Gi"), http.StatusBadRequest},
		} {
			if code, body := p.call(t, c.method, c.path, c.body); code != c.want {
				t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
			}
		}
	})
}
