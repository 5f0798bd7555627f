package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/internal/testutil"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/openfaas/faas-provider/auth"
	"github.com/openfaas/faas-provider/types"
	"github.com/prometheus/client_golang/prometheus"
)

func TestHelpDocumentsEveryFlagAndVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"help"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	fs, _ := serveFlags(&bytes.Buffer{})
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "-"+f.Name) {
			missing = append(missing, f.Name)
		}
	})
	for _, v := range []string{"port", "basic_auth", "secret_mount_path", "read_timeout", "write_timeout"} {
		if !strings.Contains(out.String(), v) {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("help does not mention %v:\n%s", missing, out.String())
	}
}

func TestBadInputFailsWithAMessage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown verb", []string{"frobnicate"}, nil, "unknown verb"},
		{"unknown flag", []string{"serve", "-nope"}, nil, "nope"},
		{"stray argument", []string{"serve", "extra"}, nil, `serve: unexpected argument "extra"`},
		{"stray argument to version", []string{"version", "extra"}, nil, `version: unexpected argument "extra"`},
		{"stray argument to import", []string{"profiles", "import", "--csv", "x.csv", "--gpu", "x", "extra"}, nil, `profiles import: unexpected argument "extra"`},
		{"stray argument to profile", []string{"profile", "extra"}, nil, `unexpected argument "extra"`},
		{"bad port", []string{"serve"}, map[string]string{"port": "eighty"}, "port"},
		{"bad timeout", []string{"serve"}, map[string]string{"read_timeout": "soon"}, "read_timeout"},
		{"auth without files", []string{"serve"}, map[string]string{"basic_auth": "true", "secret_mount_path": "/nonexistent"}, "basic_auth"},
		{"bad router", []string{"serve", "-router", "random", "-state-dir", "STATE"}, map[string]string{"port": "FREE"}, "-router"},
		{"negative queue bound", []string{"serve", "-queue-max", "-1", "-state-dir", "STATE"}, map[string]string{"port": "FREE"}, "-queue-max"},
		{"bad inventory", []string{"serve", "-inventory", "/nonexistent.yaml", "-state-dir", "STATE"}, map[string]string{"port": "FREE"}, "inventory"},
		{"bad log format", []string{"serve", "-log-format", "xml"}, nil, "-log-format"},
		{"bad image pull policy", []string{"serve", "-k8s-image-pull-policy", "Sometimes"}, nil, "-k8s-image-pull-policy"},
		{"import without csv", []string{"profiles", "import", "--gpu", "x"}, nil, "--csv"},
		{"import without gpu", []string{"profiles", "import", "--csv", "x.csv"}, nil, "--gpu"},
		{"profiles without import", []string{"profiles"}, nil, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				if v == "FREE" {
					v = freePort(t)
				}
				t.Setenv(k, v)
			}
			dir := t.TempDir()
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.ReplaceAll(a, "STATE", dir)
			}
			var out bytes.Buffer
			err := run(args, &out, &out)
			if err == nil || !strings.Contains(err.Error()+out.String(), tt.want) {
				t.Fatalf("err = %v, output %q; want a message with %q", err, out.String(), tt.want)
			}
		})
	}
}

func TestProfilesImport(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "t.csv")
	table := "model,batch,sm_percent,quota_percent,latency_ms\n" +
		"mymodel,1,10,100,40\nmymodel,1,50,100,12\nmymodel,1,100,100,10\n" +
		"other,1,10,100,80\nother,1,100,100,20\n"
	if err := os.WriteFile(csv, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var stdout bytes.Buffer
	if err := run([]string{"profiles", "import", "--csv", csv, "--gpu", "NVIDIA H200", "--out", out}, &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "wrote 2 profiles") {
		t.Fatalf("output %q", stdout.String())
	}
	store := profiles.NewStore()
	if n, err := store.LoadDir(out); err != nil || n != 2 {
		t.Fatalf("load %d profiles: %v", n, err)
	}
	p, fb, ok := store.Lookup("mymodel", "NVIDIA H200")
	if !ok || fb.Used() || len(p.Points) != 3 {
		t.Fatalf("mymodel = %+v, %v, %v", p, fb, ok)
	}
	var errOut bytes.Buffer
	bad := filepath.Join(dir, "bad.csv")
	_ = os.WriteFile(bad, []byte("model,batch,sm_percent,quota_percent,latency_ms\nm,1,10,100,abc\n"), 0o600)
	if err := run([]string{"profiles", "import", "--csv", bad, "--gpu", "x", "--out", filepath.Join(dir, "o2")}, &errOut, &errOut); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad row must fail naming its line: %v", err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	port, err := testutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(port)
}

// Every verb and sub-verb answers -h and --help with its usage, naming
// each of its flags, and succeeds (main exits 0 when run returns nil).
func TestEveryVerbHelps(t *testing.T) {
	names := func(fs *flag.FlagSet) []string {
		var out []string
		fs.VisitAll(func(f *flag.Flag) { out = append(out, "-"+f.Name) })
		return out
	}
	serve, _ := serveFlags(io.Discard)
	agent, _ := agentFlags(io.Discard)
	profile, _ := profileFlags(io.Discard)
	imp, _ := profilesImportFlags(io.Discard)
	simulate := newSimulateFlags(io.Discard).fs
	tests := []struct {
		verb []string
		want []string // besides "Usage"
	}{
		{nil, names(serve)}, // serve is the default verb
		{[]string{"serve"}, names(serve)},
		{[]string{"agent"}, names(agent)},
		{[]string{"profile"}, names(profile)},
		{[]string{"profiles"}, []string{"import"}},
		{[]string{"profiles", "import"}, names(imp)},
		{[]string{"simulate"}, names(simulate)},
		{[]string{"version"}, []string{"faas-gpu version"}},
		{[]string{"help"}, names(serve)},
	}
	for _, tt := range tests {
		for _, h := range []string{"-h", "--help"} {
			args := append(slices.Clone(tt.verb), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				if len(tt.want) == 0 {
					t.Fatal("no flags to look for")
				}
				var out bytes.Buffer
				if err := run(args, &out, &out); err != nil {
					t.Fatalf("err = %v, want none (exit 0); output %q", err, out.String())
				}
				for _, w := range append([]string{"Usage"}, tt.want...) {
					if !strings.Contains(out.String(), w) {
						t.Errorf("usage lacks %q:\n%s", w, out.String())
					}
				}
			})
		}
	}
}

// serve's router and server: faas-provider's routes, methods and basic
// auth as bootstrap.Serve sets them, served on the listener handed in,
// with the provider_http_* metrics, until the context ends.
func TestProviderServesOnItsListener(t *testing.T) {
	answer := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }
	}
	creds := &auth.BasicAuthCredentials{User: "admin", Password: "secret"}
	fh := &types.FaaSHandlers{
		FunctionLister: answer("list"), DeployFunction: answer("deploy"), UpdateFunction: answer("update"),
		DeleteFunction: answer("delete"), FunctionStatus: answer("status"), ScaleFunction: answer("scale"),
		Info: answer("info"), Secrets: answer("secrets"), Logs: answer("logs"),
		ListNamespaces: answer("namespaces"), MutateNamespace: answer("namespace"),
		FunctionProxy: answer("proxy"), Health: answer("health"),
	}
	reg := prometheus.NewRegistry()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- serveHTTP(ctx, ln, providerRouter(fh, creds, reg), types.FaaSConfig{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	}()
	base := "http://" + ln.Addr().String()
	tests := []struct {
		method, path string
		auth         bool
		code         int
		body         string
	}{
		{http.MethodGet, "/system/functions", true, 200, "list"},
		{http.MethodGet, "/system/functions", false, 401, ""},
		{http.MethodPost, "/system/functions", true, 200, "deploy"},
		{http.MethodPut, "/system/functions", true, 200, "update"},
		{http.MethodDelete, "/system/functions", true, 200, "delete"},
		{http.MethodPatch, "/system/functions", true, 405, ""},
		{http.MethodGet, "/system/function/f.1", true, 200, "status"},
		{http.MethodGet, "/system/function/f.1", false, 401, ""},
		{http.MethodPost, "/system/scale-function/f", true, 200, "scale"},
		{http.MethodGet, "/system/info", true, 200, "info"},
		{http.MethodGet, "/system/info", false, 401, ""},
		{http.MethodPut, "/system/secrets", true, 200, "secrets"},
		{http.MethodGet, "/system/logs", false, 401, ""},
		{http.MethodGet, "/system/logs", true, 200, "logs"},
		// The namespace handlers bring their own auth, as faas-provider has it.
		{http.MethodGet, "/system/namespaces", false, 200, "namespaces"},
		{http.MethodPost, "/system/namespace/team-a", false, 200, "namespace"},
		{http.MethodPost, "/function/f", false, 200, "proxy"},
		{http.MethodGet, "/function/f/", false, 200, "proxy"},
		{http.MethodGet, "/function/f/a/b?x=1", false, 200, "proxy"},
		{http.MethodGet, "/healthz", false, 200, "health"},
		{http.MethodGet, "/nope", false, 404, ""},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(tt.method, base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tt.auth {
			req.SetBasicAuth(creds.User, creds.Password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || (tt.body != "" && string(b) != tt.body) {
			t.Errorf("%s %s (auth %v) = %d %q, want %d %q", tt.method, tt.path, tt.auth, resp.StatusCode, b, tt.code, tt.body)
		}
	}
	want := map[string]float64{
		`provider_http_requests_total{code="200",method="GET",path="/system/function"}`:       1,
		`provider_http_requests_total{code="401",method="GET",path="/system/function"}`:       1,
		`provider_http_requests_total{code="200",method="POST",path="/system/functions"}`:     1,
		`provider_http_request_duration_seconds{code="200",method="GET",path="/system/logs"}`: 1,
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			got[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve after the context ended: %v", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after shutdown")
	}
}

// A port already in use is an error naming it (main exits 1), before any
// backend starts; never a log.Fatal from a goroutine.
func TestServePortTaken(t *testing.T) {
	taken, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	t.Setenv("port", port)
	var out bytes.Buffer
	err = run([]string{"serve", "-state-dir", t.TempDir(), "-log-level", "error"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "port "+port) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("err = %v, want the port %s named as in use", err, port)
	}
}
