package handlers_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/gorilla/mux"
	bootstrap "github.com/openfaas/faas-provider"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap/zaptest"
)

// newServer wires the handlers on the routes bootstrap.Serve registers
// (Serve itself owns a process-wide router, so it runs in the e2e tests).
func newServer(t *testing.T) *httptest.Server {
	return newServerWith(t, local.Config{Emulation: local.Emulation{Latency: time.Millisecond}}, handlers.ProxyOptions{Timeout: 5 * time.Second})
}

func newServerWith(t testing.TB, cfg local.Config, popts handlers.ProxyOptions) *httptest.Server {
	t.Helper()
	srv, _ := newServerAndBackend(t, cfg, popts)
	return srv
}

func newServerAndBackend(t testing.TB, cfg local.Config, popts handlers.ProxyOptions) (*httptest.Server, *local.Backend) {
	t.Helper()
	log := zaptest.NewLogger(t)
	cfg.StateDir = t.TempDir()
	if cfg.Inventory.Nodes == nil {
		cfg.Inventory = gpu.BuiltinInventory("node-a")
	}
	cfg.Log = log
	b, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(t.Context()) })
	inv := &handlers.Invocations{}
	name := "{name:[" + bootstrap.NameExpression + "]+}"
	r := mux.NewRouter()
	r.HandleFunc("/system/functions", handlers.MakeListHandler(b, inv)).Methods(http.MethodGet)
	r.HandleFunc("/system/functions", handlers.MakeDeployHandler(b, log)).Methods(http.MethodPost)
	r.HandleFunc("/system/functions", handlers.MakeUpdateHandler(b, log)).Methods(http.MethodPut)
	r.HandleFunc("/system/functions", handlers.MakeDeleteHandler(b, log, inv, popts.Metrics)).Methods(http.MethodDelete)
	r.HandleFunc("/system/function/"+name, handlers.MakeStatusHandler(b, inv)).Methods(http.MethodGet)
	r.HandleFunc("/system/scale-function/"+name, handlers.MakeScaleHandler(b, log)).Methods(http.MethodPost)
	r.HandleFunc("/system/info", handlers.MakeInfoHandler("local", "test", "sha")).Methods(http.MethodGet)
	r.HandleFunc("/system/secrets", handlers.MakeSecretsHandler(b, log)).Methods(http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete)
	r.HandleFunc("/system/logs", handlers.MakeLogsHandler(b, b, 2*time.Second)).Methods(http.MethodGet)
	r.HandleFunc("/system/namespaces", handlers.MakeNamespacesHandler(b)).Methods(http.MethodGet)
	r.HandleFunc("/system/namespace/{name:["+bootstrap.NameExpression+"]*}", handlers.MakeMutateNamespaceHandler(b)).Methods(http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodGet)
	r.HandleFunc("/system/gpus", handlers.MakeGPUsHandler(b, popts.Metrics)).Methods(http.MethodGet)
	r.HandleFunc("/healthz", handlers.MakeHealthHandler()).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/api/v1/query", handlers.MakePrometheusQueryHandler(inv)).Methods(http.MethodGet)
	proxy := handlers.MakeProxyHandler(b, inv, popts, log)
	r.HandleFunc("/function/"+name, proxy)
	r.HandleFunc("/function/"+name+"/", proxy)
	r.HandleFunc("/function/"+name+"/{params:.*}", proxy)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, b
}

func do(t testing.TB, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func mustDo(t testing.TB, srv *httptest.Server, method, path, body string, want int) string {
	t.Helper()
	code, out := do(t, srv, method, path, body)
	if code != want {
		t.Fatalf("%s %s = %d %q, want %d", method, path, code, out, want)
	}
	return out
}

// seed gives every case the same starting point: one emulated function,
// one secret, one extra namespace.
func seed(t *testing.T, srv *httptest.Server) {
	mustDo(t, srv, http.MethodPost, "/system/namespace/team-a", `{"name":"team-a"}`, http.StatusCreated)
	mustDo(t, srv, http.MethodPost, "/system/secrets", `{"name":"api-key","value":"s3cret"}`, http.StatusAccepted)
	mustDo(t, srv, http.MethodPost, "/system/functions", `{"service":"existing","image":"img","annotations":{"com.openfaas.gpu.sm":"20","com.openfaas.gpu.memory":"2Gi"}}`, http.StatusAccepted)
}

func TestRoutes(t *testing.T) {
	tests := []struct {
		name, method, path, body string
		want                     int
		wantBody                 string
	}{
		{"list", "GET", "/system/functions", "", 200, `"name":"existing"`},
		{"list other namespace", "GET", "/system/functions?namespace=team-a", "", 200, `[]`},
		{"list unknown namespace", "GET", "/system/functions?namespace=nope", "", 400, "namespace"},
		{"status", "GET", "/system/function/existing", "", 200, `"replicas":1`},
		{"status with namespace", "GET", "/system/function/existing?namespace=openfaas-fn&usage=1", "", 200, `"name":"existing"`},
		{"status unknown", "GET", "/system/function/nope", "", 404, ""},
		{"status wrong namespace", "GET", "/system/function/existing?namespace=team-a", "", 404, ""},
		{"deploy", "POST", "/system/functions", `{"service":"new","image":"img"}`, 202, ""},
		{"deploy namespace in body", "POST", "/system/functions", `{"service":"new","image":"img","namespace":"team-a"}`, 202, ""},
		{"deploy duplicate", "POST", "/system/functions", `{"service":"existing","image":"img"}`, 409, "exist"},
		{"update", "PUT", "/system/functions", `{"service":"existing","image":"img2"}`, 202, ""},
		{"update unknown", "PUT", "/system/functions", `{"service":"nope","image":"img"}`, 404, ""},
		{"delete body namespace", "DELETE", "/system/functions", `{"functionName":"existing","namespace":"openfaas-fn"}`, 202, ""},
		{"delete query namespace", "DELETE", "/system/functions?namespace=openfaas-fn", `{"functionName":"existing"}`, 202, ""},
		{"delete unknown", "DELETE", "/system/functions", `{"functionName":"nope"}`, 404, ""},
		{"delete wrong namespace", "DELETE", "/system/functions?namespace=team-a", `{"functionName":"existing"}`, 404, ""},
		{"scale body", "POST", "/system/scale-function/existing", `{"serviceName":"existing","replicas":2,"namespace":"openfaas-fn"}`, 202, ""},
		{"scale gateway style", "POST", "/system/scale-function/existing?namespace=openfaas-fn", `{"serviceName":"existing","replicas":0}`, 202, ""},
		{"scale unknown", "POST", "/system/scale-function/nope", `{"serviceName":"nope","replicas":1}`, 404, ""},
		{"info", "GET", "/system/info", "", 200, `"provider":"faas-gpu"`},
		{"health", "GET", "/healthz", "", 200, ""},
		{"namespaces", "GET", "/system/namespaces", "", 200, `["openfaas-fn","team-a"]`},
		{"namespace get", "GET", "/system/namespace/team-a", "", 200, `"name":"team-a"`},
		{"namespace get unknown", "GET", "/system/namespace/nope", "", 404, ""},
		{"namespace create duplicate", "POST", "/system/namespace/team-a", `{"name":"team-a"}`, 409, ""},
		{"namespace update", "PUT", "/system/namespace/team-a", `{"name":"team-a","annotations":{"a":"b"}}`, 202, ""},
		{"namespace delete", "DELETE", "/system/namespace/team-a", "", 202, ""},
		{"namespace delete default", "DELETE", "/system/namespace/openfaas-fn", "", 400, "default"},
		{"secrets list", "GET", "/system/secrets", "", 200, `[{"name":"api-key","namespace":"openfaas-fn"}]`},
		{"secret duplicate", "POST", "/system/secrets", `{"name":"api-key","value":"x"}`, 409, "already exists"},
		{"secret update", "PUT", "/system/secrets", `{"name":"api-key","value":"x"}`, 202, ""},
		{"secret update unknown", "PUT", "/system/secrets", `{"name":"nope","value":"x"}`, 404, ""},
		{"secret delete", "DELETE", "/system/secrets", `{"name":"api-key"}`, 202, ""},
		{"secret delete unknown", "DELETE", "/system/secrets", `{"name":"nope"}`, 404, ""},
		{"logs", "GET", "/system/logs?name=existing&follow=false", "", 200, "placed on"},
		{"logs unknown", "GET", "/system/logs?name=nope&follow=false", "", 404, ""},
		{"gpus", "GET", "/system/gpus", "", 200, `"smAllocated":20`},
		{"invoke", "POST", "/function/existing", "hello", 200, "hello"},
		{"invoke with namespace", "POST", "/function/existing.openfaas-fn/sub/path?x=1", "hi", 200, "hi"},
		{"invoke unknown", "POST", "/function/nope", "", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t)
			seed(t, srv)
			waitReady(t, srv, "existing")
			code, body := do(t, srv, tt.method, tt.path, tt.body)
			if code != tt.want {
				t.Fatalf("%s %s = %d %q, want %d", tt.method, tt.path, code, body, tt.want)
			}
			if !strings.Contains(body, tt.wantBody) {
				t.Fatalf("body %q does not contain %q", body, tt.wantBody)
			}
		})
	}
}

func waitReady(t *testing.T, srv *httptest.Server, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var st types.FunctionStatus
		if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/function/"+name, "", 200)), &st); err != nil {
			t.Fatal(err)
		}
		if st.AvailableReplicas > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never became ready", name)
}

// snapshot is everything a bad request must leave untouched.
func snapshot(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	var b bytes.Buffer
	for _, p := range []string{"/system/functions", "/system/functions?namespace=team-a", "/system/secrets", "/system/namespaces"} {
		b.WriteString(mustDo(t, srv, "GET", p, "", 200))
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/gpus", "", 200)), &rep); err != nil {
		t.Fatal(err)
	}
	for _, n := range rep["nodes"].([]any) {
		for _, g := range n.(map[string]any)["gpus"].([]any) {
			gm := g.(map[string]any)
			// readiness changes on its own; bookings must not
			for _, r := range gm["replicas"].([]any) {
				delete(r.(map[string]any), "ready")
			}
		}
	}
	out, _ := json.Marshal(rep)
	b.Write(out)
	return b.String()
}

func TestBadInputChangesNothing(t *testing.T) {
	big := `{"service":"big","image":"img","envVars":{"x":"` + strings.Repeat("a", 2<<20) + `"}}`
	tests := []struct {
		name, method, path, body string
		want                     int
		field                    string
	}{
		{"name with capitals", "POST", "/system/functions", `{"service":"Bad","image":"img"}`, 400, "service"},
		{"name with dot", "POST", "/system/functions", `{"service":"a.b","image":"img"}`, 400, "service"},
		{"name too long", "POST", "/system/functions", `{"service":"` + strings.Repeat("a", 64) + `","image":"img"}`, 400, "service"},
		{"name missing", "POST", "/system/functions", `{"image":"img"}`, 400, "service"},
		{"image missing", "POST", "/system/functions", `{"service":"fn"}`, 400, "image"},
		{"sm 0", "POST", "/system/functions", `{"service":"fn","image":"img","annotations":{"com.openfaas.gpu.sm":"0"}}`, 400, gpu.AnnotationSM},
		{"sm 101", "POST", "/system/functions", `{"service":"fn","image":"img","annotations":{"com.openfaas.gpu.sm":"101"}}`, 400, gpu.AnnotationSM},
		{"sm abc", "POST", "/system/functions", `{"service":"fn","image":"img","annotations":{"com.openfaas.gpu.sm":"abc"}}`, 400, gpu.AnnotationSM},
		{"bad memory", "POST", "/system/functions", `{"service":"fn","image":"img","annotations":{"com.openfaas.gpu.memory":"lots"}}`, 400, gpu.AnnotationMemory},
		{"memory beyond any GPU", "POST", "/system/functions", `{"service":"fn","image":"img","annotations":{"com.openfaas.gpu.memory":"40Gi"}}`, 400, gpu.AnnotationMemory},
		{"bad slo", "POST", "/system/functions", `{"service":"fn","image":"img","annotations":{"com.openfaas.gpu.slo":"soon"}}`, 400, gpu.AnnotationSLO},
		{"bad gpu limit", "POST", "/system/functions", `{"service":"fn","image":"img","limits":{"nvidia.com/gpu":"half"}}`, 400, gpu.LimitNvidiaGPU},
		{"more gpus than a node", "POST", "/system/functions", `{"service":"fn","image":"img","limits":{"nvidia.com/gpu":"3"}}`, 400, gpu.LimitNvidiaGPU},
		{"bad memory limit", "POST", "/system/functions", `{"service":"fn","image":"img","limits":{"memory":"huge"}}`, 400, "limits.memory"},
		{"bad scale min", "POST", "/system/functions", `{"service":"fn","image":"img","labels":{"com.openfaas.scale.min":"-1"}}`, 400, "com.openfaas.scale.min"},
		{"min above max", "POST", "/system/functions", `{"service":"fn","image":"img","labels":{"com.openfaas.scale.min":"5","com.openfaas.scale.max":"2"}}`, 400, "com.openfaas.scale.min"},
		{"unknown secret", "POST", "/system/functions", `{"service":"fn","image":"img","secrets":["nope"]}`, 400, "secrets"},
		{"unknown namespace", "POST", "/system/functions", `{"service":"fn","image":"img","namespace":"nope"}`, 400, "namespace"},
		{"bad label value", "POST", "/system/functions", `{"service":"fn","image":"img","labels":{"k":"has space"}}`, 400, "labels.k"},
		{"bad env name", "POST", "/system/functions", `{"service":"fn","image":"img","envVars":{"1x=":"v"}}`, 400, "envVars"},
		{"not json", "POST", "/system/functions", `{not json`, 400, "body"},
		{"wrong json type", "POST", "/system/functions", `{"service":7,"image":"img"}`, 400, "service"},
		{"empty body", "POST", "/system/functions", ``, 400, "body"},
		{"over-large body", "POST", "/system/functions", big, 413, "body"},
		{"update bad sm", "PUT", "/system/functions", `{"service":"existing","image":"img","annotations":{"com.openfaas.gpu.sm":"0"}}`, 400, gpu.AnnotationSM},
		{"delete without name", "DELETE", "/system/functions", `{}`, 400, "functionName"},
		{"delete unknown", "DELETE", "/system/functions", `{"functionName":"nope"}`, 404, "nope"},
		{"scale not json", "POST", "/system/scale-function/existing", `replicas=3`, 400, "body"},
		{"scale negative", "POST", "/system/scale-function/existing", `{"replicas":-1}`, 400, "replicas"},
		{"scale name mismatch", "POST", "/system/scale-function/existing", `{"serviceName":"other","replicas":1}`, 400, "serviceName"},
		{"scale unknown", "POST", "/system/scale-function/nope", `{"replicas":1}`, 404, "nope"},
		{"duplicate secret", "POST", "/system/secrets", `{"name":"api-key","value":"other"}`, 409, "api-key"},
		{"secret without value", "POST", "/system/secrets", `{"name":"empty"}`, 400, "value"},
		{"secret bad name", "POST", "/system/secrets", `{"name":"Bad_Name","value":"v"}`, 400, "name"},
		{"secret bad namespace", "POST", "/system/secrets", `{"name":"x","value":"v","namespace":"Bad"}`, 400, "namespace"},
		{"logs bad tail", "GET", "/system/logs?name=existing&tail=abc", "", 400, "tail"},
		{"logs bad since", "GET", "/system/logs?name=existing&since=yesterday", "", 400, "since"},
		{"logs bad follow", "GET", "/system/logs?name=existing&follow=maybe", "", 400, "follow"},
		{"logs no name", "GET", "/system/logs", "", 400, "name"},
		{"namespace bad name", "POST", "/system/namespace/Bad", `{"name":"Bad"}`, 400, "name"},
		{"namespace not empty", "DELETE", "/system/namespace/team-a", "", 400, "functions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t)
			seed(t, srv)
			mustDo(t, srv, "POST", "/system/functions", `{"service":"resident","image":"img","namespace":"team-a","annotations":{"com.openfaas.gpu.sm":"10"}}`, 202)
			before := snapshot(t, srv)
			code, body := do(t, srv, tt.method, tt.path, tt.body)
			if code != tt.want {
				t.Fatalf("%s %s = %d %q, want %d", tt.method, tt.path, code, body, tt.want)
			}
			if !strings.Contains(body, tt.field) {
				t.Fatalf("error %q does not name %q", body, tt.field)
			}
			if after := snapshot(t, srv); after != before {
				t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func TestScaleShowsDesiredAtOnce(t *testing.T) {
	srv := newServer(t)
	seed(t, srv)
	mustDo(t, srv, "POST", "/system/scale-function/existing", `{"replicas":3}`, 202)
	var st types.FunctionStatus
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/function/existing", "", 200)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 3 {
		t.Fatalf("replicas = %d right after scaling to 3", st.Replicas)
	}
	mustDo(t, srv, "POST", "/system/scale-function/existing", `{"replicas":0}`, 202)
	st = types.FunctionStatus{} // replicas 0 is omitted from the JSON
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/function/existing", "", 200)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 0 || st.AvailableReplicas != 0 {
		t.Fatalf("after scale to 0: replicas %d available %d", st.Replicas, st.AvailableReplicas)
	}
	if code, _ := do(t, srv, "POST", "/function/existing", "x"); code != http.StatusServiceUnavailable {
		t.Fatalf("invoke at 0 replicas = %d, want 503", code)
	}
}

func TestInvocationCount(t *testing.T) {
	srv := newServer(t)
	seed(t, srv)
	waitReady(t, srv, "existing")
	for range 3 {
		mustDo(t, srv, "POST", "/function/existing", "x", 200)
	}
	var list []types.FunctionStatus
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/functions", "", 200)), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].InvocationCount != 3 {
		t.Fatalf("list = %+v, want one function with 3 invocations", list)
	}
	// What the gateway reads in place of Prometheus.
	var q struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  []any
			}
		}
	}
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/api/v1/query?query=sum(gateway_function_invocation_total)", "", 200)), &q); err != nil {
		t.Fatal(err)
	}
	if q.Status != "success" || len(q.Data.Result) != 1 || q.Data.Result[0].Metric["function_name"] != "existing.openfaas-fn" || q.Data.Result[0].Value[1] != "3" {
		t.Fatalf("query answer = %+v", q)
	}
}

func TestStatusEchoesDeployment(t *testing.T) {
	srv := newServer(t)
	body := `{"service":"echo","image":"img","namespace":"openfaas-fn","envProcess":"cat","envVars":{"a":"b"},
		"labels":{"com.openfaas.scale.min":"1"},"annotations":{"com.openfaas.gpu.sm":"25"},
		"limits":{"memory":"128Mi"},"requests":{"cpu":"100m"},"constraints":["x=y"]}`
	mustDo(t, srv, "POST", "/system/functions", body, 202)
	var st types.FunctionStatus
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/function/echo", "", 200)), &st); err != nil {
		t.Fatal(err)
	}
	want := types.FunctionStatus{
		Name: "echo", Image: "img", Namespace: "openfaas-fn", EnvProcess: "cat", EnvVars: map[string]string{"a": "b"},
		Labels: &map[string]string{"com.openfaas.scale.min": "1"}, Annotations: &map[string]string{"com.openfaas.gpu.sm": "25"},
		Limits: &types.FunctionResources{Memory: "128Mi"}, Requests: &types.FunctionResources{CPU: "100m"}, Constraints: []string{"x=y"},
		Replicas: 1,
	}
	st.CreatedAt, st.AvailableReplicas = time.Time{}, 0
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("status = %+v\nwant %+v", st, want)
	}
}
