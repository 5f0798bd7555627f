package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
)

// TestContract drives the provider on loopback with go-sdk's client, the
// code faas-cli runs, and checks the answers clients rely on (the
// reference's §1.4 and §4.2).
func TestContract(t *testing.T) {
	httpfn := httpfnBin.get(t)
	c := newCreds(t)
	p := startProvider(t, c, t.TempDir(), 0)
	cl, rec := p.Client, p.Rec
	ctx := context.Background()

	t.Run("unauthenticated", func(t *testing.T) {
		for _, path := range []string{"/system/functions", "/system/namespaces", "/system/gpus", "/system/info", "/system/secrets"} {
			r := mustDo(t, p.HTTP, http.MethodGet, p.URL+path, nil, nil, nil)
			if r.Code != http.StatusUnauthorized {
				t.Errorf("GET %s without credentials: want 401, got %s", path, r)
			}
			wrong := creds{User: c.User, Password: c.Password + "x"}
			r = mustDo(t, p.HTTP, http.MethodGet, p.URL+path, nil, &wrong, nil)
			if r.Code != http.StatusUnauthorized {
				t.Errorf("GET %s with a wrong password: want 401, got %s", path, r)
			}
		}
		// Invocation is public, as in OpenFaaS: an unknown function is a 404,
		// not a 401.
		r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/function/nope", nil, nil, nil)
		if r.Code != http.StatusNotFound {
			t.Errorf("GET /function/nope without credentials: want 404, got %s", r)
		}
	})

	t.Run("info", func(t *testing.T) {
		r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/info", nil, &c, nil)
		if r.Code != http.StatusOK {
			t.Fatalf("GET /system/info: want 200, got %s", r)
		}
		var info types.ProviderInfo
		if err := json.Unmarshal(r.Body, &info); err != nil {
			t.Fatalf("GET /system/info: %v: %s", err, r.Body)
		}
		if info.Name != "faas-gpu" || info.Orchestration == "" || info.Version == nil || info.Version.Release == "" {
			t.Errorf("GET /system/info: want provider faas-gpu with an orchestration and a release, got %s", r.Body)
		}
	})

	t.Run("namespaces", func(t *testing.T) {
		nss, err := cl.GetNamespaces(ctx)
		if err != nil || len(nss) == 0 || nss[0] != defaultNS {
			t.Fatalf("GetNamespaces: want %s first (the UI selects [0]), got %v, %v", defaultNS, nss, err)
		}
		code, err := cl.CreateNamespace(ctx, types.FunctionNamespace{Name: "team-a", Labels: map[string]string{"team": "a"}})
		if err != nil || code != http.StatusCreated {
			t.Fatalf("CreateNamespace team-a: want 201, got %d, %v", code, err)
		}
		if code, err = cl.CreateNamespace(ctx, types.FunctionNamespace{Name: "team-a"}); code != http.StatusConflict {
			t.Errorf("CreateNamespace team-a again: want 409, got %d, %v", code, err)
		}
		got, err := cl.GetNamespace(ctx, "team-a")
		if err != nil || got.Name != "team-a" || got.Labels["team"] != "a" {
			t.Fatalf("GetNamespace team-a: want it with label team=a, got %+v, %v", got, err)
		}
		code, err = cl.UpdateNamespace(ctx, types.FunctionNamespace{Name: "team-a", Labels: map[string]string{"team": "b"}, Annotations: map[string]string{"owner": "ml"}})
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("UpdateNamespace team-a: want 202, got %d, %v", code, err)
		}
		if got, err = cl.GetNamespace(ctx, "team-a"); err != nil || got.Labels["team"] != "b" || got.Annotations["owner"] != "ml" {
			t.Errorf("GetNamespace after the update: want team=b and owner=ml, got %+v, %v", got, err)
		}
		if code, err = cl.UpdateNamespace(ctx, types.FunctionNamespace{Name: "team-z"}); code != http.StatusNotFound {
			t.Errorf("UpdateNamespace of an unknown namespace: want 404, got %d, %v", code, err)
		}
		if nss, err = cl.GetNamespaces(ctx); err != nil || !slices.Contains(nss, "team-a") || nss[0] != defaultNS {
			t.Errorf("GetNamespaces: want %s first and team-a listed, got %v, %v", defaultNS, nss, err)
		}

		// A function in the namespace keeps it from being removed.
		dep := types.FunctionDeployment{Service: "ns-fn", Image: "example.com/ns-fn:1", Namespace: "team-a"}
		if code, err := cl.Deploy(ctx, dep); err != nil || code != http.StatusAccepted {
			t.Fatalf("Deploy ns-fn in team-a: want 202, got %d, %v", code, err)
		}
		fns, err := cl.GetFunctions(ctx, "team-a")
		if err != nil || len(fns) != 1 || fns[0].Name != "ns-fn" || fns[0].Namespace != "team-a" {
			t.Errorf("GetFunctions team-a: want only ns-fn, got %+v, %v", fns, err)
		}
		if fns, err := cl.GetFunctions(ctx, defaultNS); err != nil || slices.ContainsFunc(fns, func(f types.FunctionStatus) bool { return f.Name == "ns-fn" }) {
			t.Errorf("GetFunctions %s lists team-a's ns-fn: %+v, %v", defaultNS, fns, err)
		}
		err = cl.DeleteNamespace(ctx, "team-a")
		if code := rec.take(); err == nil || code != http.StatusBadRequest {
			t.Errorf("DeleteNamespace team-a with a function in it: want 400, got %d, %v", code, err)
		}
		if err := cl.DeleteFunction(ctx, "ns-fn", "team-a"); err != nil {
			t.Fatalf("DeleteFunction ns-fn in team-a: %v", err)
		}
		err = cl.DeleteNamespace(ctx, "team-a")
		if code := rec.take(); err != nil || code != http.StatusAccepted {
			t.Fatalf("DeleteNamespace team-a: want 202, got %d, %v", code, err)
		}
		if _, err := cl.GetNamespace(ctx, "team-a"); !sdkNotFound(err) {
			t.Errorf("GetNamespace after the delete: want 404, got %v", err)
		}
		err = cl.DeleteNamespace(ctx, "team-a")
		if code := rec.take(); code != http.StatusNotFound {
			t.Errorf("DeleteNamespace team-a again: want 404, got %d, %v", code, err)
		}
		if err := cl.DeleteNamespace(ctx, defaultNS); err == nil {
			t.Errorf("DeleteNamespace %s: want a refusal, got success", defaultNS)
		}
	})

	t.Run("secrets", func(t *testing.T) {
		code, err := cl.CreateSecret(ctx, types.Secret{Name: "api-key", Value: "first-value"})
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("CreateSecret api-key: want 202, got %d, %v", code, err)
		}
		if code, err = cl.CreateSecret(ctx, types.Secret{Name: "api-key", Value: "other"}); code != http.StatusConflict {
			t.Errorf("CreateSecret api-key again: want 409, got %d, %v", code, err)
		}
		code, err = cl.CreateSecret(ctx, types.Secret{Name: "raw-key", RawValue: []byte{0, 1, 2, 0xff}, Namespace: defaultNS})
		if err != nil || code != http.StatusAccepted {
			t.Fatalf("CreateSecret raw-key (rawValue): want 202, got %d, %v", code, err)
		}
		list, err := cl.GetSecrets(ctx, defaultNS)
		if err != nil {
			t.Fatalf("GetSecrets: %v", err)
		}
		names := []string{}
		for _, s := range list {
			names = append(names, s.Name)
			if s.Value != "" || len(s.RawValue) > 0 || s.Namespace != defaultNS {
				t.Errorf("GetSecrets: %s must come with its namespace and without its value, got %+v", s.Name, s)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"api-key", "raw-key"}) {
			t.Errorf("GetSecrets: want [api-key raw-key], got %v", names)
		}
		r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/secrets?namespace="+defaultNS, nil, &c, nil)
		if strings.Contains(string(r.Body), "first-value") || strings.Contains(string(r.Body), "value\"") {
			t.Errorf("GET /system/secrets leaks values: %s", r.Body)
		}
		if code, err = cl.UpdateSecret(ctx, types.Secret{Name: "api-key", Value: "second-value"}); err != nil || code != http.StatusAccepted {
			t.Errorf("UpdateSecret api-key: want 202, got %d, %v", code, err)
		}
		if code, err = cl.UpdateSecret(ctx, types.Secret{Name: "nope", Value: "x"}); code != http.StatusNotFound {
			t.Errorf("UpdateSecret of an unknown secret: want 404, got %d, %v", code, err)
		}
		err = cl.DeleteSecret(ctx, "raw-key", defaultNS)
		if code := rec.take(); err != nil || code != http.StatusAccepted {
			t.Errorf("DeleteSecret raw-key: want 202, got %d, %v", code, err)
		}
		err = cl.DeleteSecret(ctx, "raw-key", defaultNS)
		if code := rec.take(); code != http.StatusNotFound {
			t.Errorf("DeleteSecret raw-key again: want 404, got %d, %v", code, err)
		}
	})

	annotations := map[string]string{"com.openfaas.gpu.sm": "50", "com.openfaas.gpu.memory": "4Gi", "com.openfaas.gpu.model": "echo-model"}
	labels := map[string]string{"team": "vision"}
	echo := types.FunctionDeployment{
		Service:     "echo-http",
		Image:       "example.com/echo-http:1",
		EnvProcess:  httpfn,
		EnvVars:     map[string]string{"mode": "http", "GREETING": "hello"},
		Secrets:     []string{"api-key"},
		Labels:      &labels,
		Annotations: &annotations,
	}
	emu := types.FunctionDeployment{Service: "emu", Image: "example.com/resnet50:1",
		Annotations: &map[string]string{"com.openfaas.gpu.sm": "20", "com.openfaas.gpu.memory": "2Gi"}}

	t.Run("deploy", func(t *testing.T) {
		if code, err := cl.Update(ctx, echo); code != http.StatusNotFound {
			t.Fatalf("Update of a function that does not exist: want 404 (faas-cli then POSTs), got %d, %v", code, err)
		}
		for _, dep := range []types.FunctionDeployment{echo, emu} {
			if code, err := cl.Deploy(ctx, dep); err != nil || code != http.StatusAccepted {
				t.Fatalf("Deploy %s: want 202, got %d, %v", dep.Service, code, err)
			}
		}
		before := p.waitReady(t, defaultNS, "echo-http", 1, 30*time.Second)
		dup := emu
		dup.Image = "example.com/other:2"
		if code, err := cl.Deploy(ctx, dup); code != http.StatusConflict {
			t.Errorf("Deploy of an existing function: want 409, got %d, %v", code, err)
		}
		if _, st := p.status(t, defaultNS, "emu"); st.Image != emu.Image {
			t.Errorf("a refused duplicate deploy changed emu's image to %q", st.Image)
		}
		if _, st := p.status(t, defaultNS, "echo-http"); !st.CreatedAt.Equal(before.CreatedAt) {
			t.Errorf("createdAt changed without an update: %v then %v", before.CreatedAt, st.CreatedAt)
		}
	})

	t.Run("get and list", func(t *testing.T) {
		st, err := cl.GetFunction(ctx, "echo-http", defaultNS)
		if err != nil {
			t.Fatalf("GetFunction echo-http: %v", err)
		}
		if st.Name != "echo-http" || st.Image != echo.Image || st.Namespace != defaultNS || st.EnvProcess != httpfn ||
			!slices.Equal(st.Secrets, []string{"api-key"}) || st.Replicas != 1 || st.CreatedAt.IsZero() {
			t.Errorf("GetFunction echo-http: fields not echoed: %+v", st)
		}
		if st.Annotations == nil || !mapContains(*st.Annotations, annotations) {
			t.Errorf("GetFunction echo-http: want annotations %v, got %v", annotations, st.Annotations)
		}
		if st.Labels == nil || (*st.Labels)["team"] != "vision" || (*st.Labels)["com.openfaas.gpu.emulated"] != "" {
			t.Errorf("GetFunction echo-http: want label team=vision and no emulated label, got %v", st.Labels)
		}
		es := p.waitReady(t, defaultNS, "emu", 1, 20*time.Second)
		if es.Labels["com.openfaas.gpu.emulated"] != "true" {
			t.Errorf("emu (image only) is not marked emulated: labels %v", es.Labels)
		}
		if _, err := cl.GetFunction(ctx, "nope", defaultNS); err == nil || rec.take() != http.StatusNotFound {
			t.Errorf("GetFunction of an unknown function: want 404, got %v", err)
		}
		fns, err := cl.GetFunctions(ctx, defaultNS)
		if err != nil {
			t.Fatalf("GetFunctions: %v", err)
		}
		var got []string
		for _, f := range fns {
			got = append(got, f.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"echo-http", "emu"}) {
			t.Errorf("GetFunctions: want [echo-http emu], got %v", got)
		}
		// The slice asked for is the slice booked.
		rep := p.gpus(t)
		reps := rep.servingOf("echo-http")
		if len(reps) != 1 {
			t.Fatalf("/system/gpus: want one echo-http replica, got %v", reps)
		}
		for _, ps := range reps {
			if len(ps) != 1 || ps[0].SMPercent != 50 || ps[0].MemoryBytes != 4<<30 {
				t.Errorf("/system/gpus: echo-http's slice: want 50%% SM and 4Gi on one GPU, got %+v", ps)
			}
		}
	})

	t.Run("invoke and secret file", func(t *testing.T) {
		r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/function/echo-http/env/GREETING", nil, nil, nil)
		if r.Code != http.StatusOK || string(r.Body) != "hello" {
			t.Errorf("GET /function/echo-http/env/GREETING: want 200 hello, got %s", r)
		}
		r = mustDo(t, p.HTTP, http.MethodGet, p.URL+"/function/echo-http/env/secret_mount_path", nil, nil, nil)
		if r.Code != http.StatusOK || len(r.Body) == 0 {
			t.Fatalf("GET /function/echo-http/env/secret_mount_path: want a folder, got %s", r)
		}
		checkSecretFile(t, filepath.Join(string(r.Body), "api-key"), "second-value")
	})

	t.Run("scale", func(t *testing.T) {
		if err := cl.ScaleFunction(ctx, "emu", defaultNS, 2); err != nil || rec.take() != http.StatusAccepted {
			t.Fatalf("ScaleFunction emu 2: want 202, got %v", err)
		}
		if _, st := p.status(t, defaultNS, "emu"); st.Replicas != 2 {
			t.Errorf("right after scaling to 2, replicas must say 2 (the gateway relies on it), got %d", st.Replicas)
		}
		p.waitReady(t, defaultNS, "emu", 2, 20*time.Second)
		if n := len(p.gpus(t).servingOf("emu")); n != 2 {
			t.Errorf("/system/gpus: want 2 emu replicas in service, got %d", n)
		}
		if err := cl.ScaleFunction(ctx, "nope", defaultNS, 1); !sdkNotFound(err) || rec.take() != http.StatusNotFound {
			t.Errorf("ScaleFunction of an unknown function: want 404, got %v", err)
		}
		if err := cl.ScaleFunction(ctx, "emu", defaultNS, 1); err != nil {
			t.Fatalf("ScaleFunction emu 1: %v", err)
		}
		eventually(t, 10*time.Second, "emu back to one replica in service", func() (bool, string) {
			_, st := p.status(t, defaultNS, "emu")
			rep := p.gpus(t)
			n, all := len(rep.servingOf("emu")), len(rep.replicasOf("emu"))
			// The one taken away may stay warm (idle), never in service.
			return st.Replicas == 1 && st.AvailableReplicas == 1 && n == 1 && all <= 2,
				fmt.Sprintf("replicas %d available %d in service %d placed %d", st.Replicas, st.AvailableReplicas, n, all)
		})
	})

	t.Run("update", func(t *testing.T) {
		upd := echo
		upd.EnvVars = map[string]string{"mode": "http", "GREETING": "bonjour"}
		if code, err := cl.Update(ctx, upd); err != nil || code != http.StatusAccepted {
			t.Fatalf("Update echo-http: want 202, got %d, %v", code, err)
		}
		eventually(t, 30*time.Second, "echo-http answers with the updated environment", func() (bool, string) {
			r, err := do(p.HTTP, http.MethodGet, p.URL+"/function/echo-http/env/GREETING", nil, nil, nil)
			if err != nil {
				return false, err.Error()
			}
			return r.Code == http.StatusOK && string(r.Body) == "bonjour", r.String()
		})
		if st, err := cl.GetFunction(ctx, "echo-http", defaultNS); err != nil || st.EnvVars["GREETING"] != "bonjour" {
			t.Errorf("GetFunction after the update: want GREETING=bonjour, got %v, %v", st.EnvVars, err)
		}
	})

	t.Run("logs", func(t *testing.T) {
		r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/function/echo-http/env/LOGME", nil, nil, nil)
		if r.Code != http.StatusOK {
			t.Fatalf("GET /function/echo-http/env/LOGME: %s", r)
		}
		replicas := p.gpus(t).replicasOf("echo-http")
		var all []logs.Message
		eventually(t, 10*time.Second, "the replica's request line in GetLogs(follow=false)", func() (bool, string) {
			all = getLogs(t, p, "echo-http", 0)
			for _, m := range all {
				if strings.Contains(m.Text, "httpfn GET /env/LOGME") {
					if _, ok := replicas[m.Instance]; !ok {
						return false, fmt.Sprintf("line %q comes from instance %q, not a current replica %v", m.Text, m.Instance, replicas)
					}
					return m.Name == "echo-http" && !m.Timestamp.IsZero(), fmt.Sprintf("%+v", m)
				}
			}
			return false, fmt.Sprintf("%d messages, none with the request", len(all))
		})
		eventually(t, 10*time.Second, "GetLogs with tail=2 gives the last two messages", func() (bool, string) {
			before := getLogs(t, p, "echo-http", 0)
			tail := getLogs(t, p, "echo-http", 2)
			after := getLogs(t, p, "echo-http", 0)
			if len(before) != len(after) || len(after) < 3 {
				return false, fmt.Sprintf("log still growing or too short (%d, %d)", len(before), len(after))
			}
			want := after[len(after)-2:]
			ok := len(tail) == 2 && tail[0].Text == want[0].Text && tail[1].Text == want[1].Text
			return ok, fmt.Sprintf("tail %+v, want %+v", tail, want)
		})
		r = mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/logs?name=echo-http&follow=false&tail=1", nil, &c, nil)
		if ct := r.Header.Get("Content-Type"); r.Code != http.StatusOK || !strings.HasPrefix(ct, "application/x-ndjson") {
			t.Errorf("GET /system/logs: want 200 application/x-ndjson, got %s with Content-Type %q", r, ct)
		}
		var m logs.Message
		if lines := strings.Split(strings.TrimSpace(string(r.Body)), "\n"); len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &m) != nil || m.Name != "echo-http" {
			t.Errorf("GET /system/logs?tail=1: want one NDJSON logs.Message of echo-http, got %q", r.Body)
		}
		r = mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/logs?name=nope&follow=false", nil, &c, nil)
		if r.Code != http.StatusNotFound {
			t.Errorf("logs of an unknown function: want 404, got %s", r)
		}
	})

	t.Run("delete", func(t *testing.T) {
		old := p.processReplicas("echo-http")
		for _, name := range []string{"echo-http", "emu"} {
			err := cl.DeleteFunction(ctx, name, defaultNS)
			if code := rec.take(); err != nil || code != http.StatusAccepted {
				t.Errorf("DeleteFunction %s: want 202, got %d, %v", name, code, err)
			}
			err = cl.DeleteFunction(ctx, name, defaultNS)
			if code := rec.take(); !sdkNotFound(err) || code != http.StatusNotFound {
				t.Errorf("DeleteFunction %s again: want 404, got %d, %v", name, code, err)
			}
			if code, _ := p.status(t, defaultNS, name); code != http.StatusNotFound {
				t.Errorf("GET /system/function/%s after the delete: want 404, got %d", name, code)
			}
		}
		if fns, err := cl.GetFunctions(ctx, defaultNS); err != nil || len(fns) != 0 {
			t.Errorf("GetFunctions after deleting everything: want [], got %+v, %v", fns, err)
		}
		if len(old) == 0 {
			t.Fatalf("the provider logged no \"replica started\" line for echo-http's process")
		}
		for _, pr := range old {
			eventually(t, 10*time.Second, fmt.Sprintf("process %d of replica %s ends with its function", pr.PID, pr.ID), func() (bool, string) {
				return !processAlive(pr.PID), "still running"
			})
		}
		requireNothingAllocated(t, p)
	})
}

func getLogs(t *testing.T, p *provider, name string, tail int) []logs.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := p.Client.GetLogs(ctx, name, defaultNS, false, tail, nil)
	if err != nil {
		t.Fatalf("GetLogs %s: %v", name, err)
	}
	var out []logs.Message
	for m := range ch {
		out = append(out, m)
	}
	if ctx.Err() != nil {
		t.Fatalf("GetLogs %s with follow=false did not end within 20s", name)
	}
	return out
}

func checkSecretFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the function's secret file: %v", err)
	}
	if string(b) != want {
		t.Errorf("secret file %s: want %q, got %q", path, want, b)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		t.Errorf("secret file %s: mode %v lets others read it", path, st.Mode().Perm())
	}
}

func mapContains(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// requireNothingAllocated waits until no GPU has anything booked and
// nothing is pending.
func requireNothingAllocated(t *testing.T, p *provider) {
	t.Helper()
	eventually(t, 10*time.Second, "GET /system/gpus shows nothing allocated and nothing pending", func() (bool, string) {
		rep := p.gpus(t)
		b, _ := json.Marshal(rep)
		if len(rep.allGPUs()) == 0 || len(rep.Pending) != 0 {
			return false, string(b)
		}
		for _, g := range rep.allGPUs() {
			if g.SMAllocated != 0 || g.MemoryAllocated != 0 || len(g.Replicas) != 0 {
				return false, string(b)
			}
		}
		return true, ""
	})
}
