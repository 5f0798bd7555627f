package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/internal/testutil"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	sdk "github.com/openfaas/go-sdk"
)

// TestProfileEndToEnd profiles smfn (local/testdata/smfn: slower the fewer
// SMs it is given) on a real `faas-gpu serve` with the local backend, then
// loads the result into a restarted provider and checks that the
// scheduler decides from it.
func TestProfileEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the provider")
	}
	bins := buildProfileBinaries(t)
	prov := startProfileProvider(t, bins.faasGPU, t.TempDir(), "")
	prov.deploy(t, types.FunctionDeployment{
		Service:     "smfn",
		Image:       "smfn",
		EnvProcess:  bins.smfn,
		EnvVars:     map[string]string{"mode": "http", "SMFN_WORK_MS": "3"},
		Annotations: &map[string]string{"com.openfaas.gpu.sm": "10"},
	})
	prov.waitReady(t, "smfn")
	t.Setenv("OPENFAAS_USER", prov.user)
	t.Setenv("OPENFAAS_PASSWORD", prov.pass)
	profileDir := t.TempDir()
	out := filepath.Join(profileDir, "smfn.yaml")

	t.Run("measures smfn as it behaves", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		err := profileCmd([]string{"--gateway", prov.url, "--function", "smfn", "--sm", "10,25,50,100",
			"--duration", "1s", "--warmup", "200ms", "--concurrency", "4", "--progress-interval", "400ms", "--out", out}, &stdout, &stderr)
		t.Logf("profile took %v\n%s%s", time.Since(start), stderr.String(), stdout.String())
		if err != nil {
			t.Fatal(err)
		}
		testutil.ReadSMFNProfile(t, out, gpu.V100Product, []int{10, 25, 50, 100})
		rates := summaryThroughputs(t, stdout.String())
		for i := 1; i < len(rates); i++ {
			if rates[i] <= rates[i-1] {
				t.Errorf("throughput %v does not rise with SM %%", rates)
				break
			}
		}
		if len(rates) != 4 {
			t.Errorf("summary has %d rows, want 4:\n%s", len(rates), stdout.String())
		}
		for _, want := range []string{"sm 25%: deploying smfn-profile-25", "sm 25% (1 in flight): ", "sm 25% (4 in flight): ",
			"on " + gpu.V100Product, "removed smfn-profile-25", "req, p50 "} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("progress lacks %q", want)
			}
		}
		prov.requireOnly(t, "smfn")
	})

	t.Run("bad input fails with a message", func(t *testing.T) {
		closed := "http://127.0.0.1:" + freePort(t)
		base := []string{"--gateway", prov.url, "--duration", "1s", "--out", filepath.Join(t.TempDir(), "x.yaml")}
		tests := []struct {
			name string
			args []string
			want string
		}{
			{"unknown function", []string{"--function", "nope"}, "function nope"},
			{"sm outside 1-100", []string{"--function", "smfn", "--sm", "10,101"}, "--sm: 101 is outside 1-100"},
			{"sm not a number", []string{"--function", "smfn", "--sm", "ten"}, "--sm: \"ten\" is not a comma-separated list"},
			{"bad duration", []string{"--function", "smfn", "--duration", "soon"}, "invalid value \"soon\" for flag -duration"},
			{"zero duration", []string{"--function", "smfn", "--duration", "0s"}, "--duration: 0s must be positive"},
			{"no function", []string{}, "--function is required"},
			{"no out", []string{"--function", "smfn", "--out", ""}, "--out is required"},
			{"out folder missing", []string{"--function", "smfn", "--out", "/nonexistent/x.yaml"}, "--out: folder /nonexistent does not exist"},
			{"unreachable gateway", []string{"--function", "smfn", "--gateway", closed}, "cannot reach the gateway at " + closed},
			{"not a URL", []string{"--function", "smfn", "--gateway", "127.0.0.1:8080"}, "--gateway"},
			{"wrong password", []string{"--function", "smfn", "--password", "wrong"}, "unauthorized (401)"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var outb bytes.Buffer
				err := profileCmd(append(slices.Clone(base), tt.args...), &outb, &outb)
				if err == nil || !strings.Contains(err.Error(), tt.want) && !strings.Contains(outb.String(), tt.want) {
					t.Fatalf("err = %v, output %q; want a message with %q", err, outb.String(), tt.want)
				}
			})
		}
		prov.requireOnly(t, "smfn")
	})

	t.Run("Ctrl-C removes the temporary function", func(t *testing.T) {
		stderr := newWatchedBuffer("sm 10% (1 in flight): ")
		done := make(chan error, 1)
		go func() {
			done <- profileCmd([]string{"--gateway", prov.url, "--function", "smfn", "--sm", "10,100", "--duration", "60s",
				"--warmup", "0s", "--progress-interval", "100ms", "--out", filepath.Join(t.TempDir(), "x.yaml")}, &bytes.Buffer{}, stderr)
		}()
		select {
		case <-stderr.seen:
		case err := <-done:
			t.Fatalf("profile ended before measuring: %v\n%s", err, stderr)
		case <-time.After(20 * time.Second):
			t.Fatalf("no measurement started:\n%s", stderr)
		}
		prov.requireOnly(t, "smfn", "smfn-profile-10")
		// profileCmd's signal.NotifyContext holds SIGINT now, so the test
		// process receives it as a Ctrl-C would reach the CLI.
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "interrupted") {
				t.Fatalf("err = %v, want an interruption", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("profile did not stop on SIGINT:\n%s", stderr)
		}
		for _, want := range []string{"interrupted: removing temporary functions", "removed smfn-profile-10"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		prov.requireOnly(t, "smfn")
	})

	t.Run("serve -profiles decides from the measured profile", func(t *testing.T) {
		want, err := os.ReadFile(out)
		if err != nil {
			t.Skip("no profile: the measuring subtest failed")
		}
		p, err := profiles.Parse(want)
		if err != nil {
			t.Fatal(err)
		}
		prov.stop(t)
		prov = startProfileProvider(t, bins.faasGPU, prov.stateDir, profileDir)
		prov.deploy(t, types.FunctionDeployment{
			Service:     "consumer",
			Image:       "example/consumer", // no process: an emulated replica
			Annotations: &map[string]string{"com.openfaas.gpu.model": "smfn"},
		})
		choice, err := scheduler.Choose(&p, 0, scheduler.ChooseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		decision := prov.decision(t, "consumer")
		if decision != choice.Explanation || !strings.HasPrefix(decision, "smfn on "+gpu.V100Product+": sm ") {
			t.Fatalf("consumer's decision %q, want the measured profile's choice %q", decision, choice.Explanation)
		}
	})
}

func TestProfileCredentials(t *testing.T) {
	secrets := t.TempDir()
	for name, v := range map[string]string{"basic-auth-user": "fromfile\n", "basic-auth-password": "filepass\n"} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name               string
		flagUser, flagPass string
		envUser, envPass   string
		secretDir          string
		wantUser, wantPass string
		wantErr            string
	}{
		{name: "none", wantUser: "", wantPass: ""},
		{name: "flags", flagUser: "u", flagPass: "p", envUser: "eu", envPass: "ep", secretDir: secrets, wantUser: "u", wantPass: "p"},
		{name: "variables", envUser: "eu", envPass: "ep", secretDir: secrets, wantUser: "eu", wantPass: "ep"},
		{name: "a password alone means admin", envPass: "ep", wantUser: "admin", wantPass: "ep"},
		{name: "secret folder, trimmed", secretDir: secrets, wantUser: "fromfile", wantPass: "filepass"},
		{name: "user without password", flagUser: "u", wantErr: `user "u" has no password`},
		{name: "missing secret folder", secretDir: "/nonexistent", wantErr: "--secret-mount-path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OPENFAAS_USER", tt.envUser)
			t.Setenv("OPENFAAS_PASSWORD", tt.envPass)
			user, pass, err := profileCredentials(&profileOptions{user: tt.flagUser, pass: tt.flagPass, secretDir: tt.secretDir})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || user != tt.wantUser || pass != tt.wantPass {
				t.Fatalf("got %q, %q, %v; want %q, %q", user, pass, err, tt.wantUser, tt.wantPass)
			}
		})
	}
}

// summaryThroughputs reads the req/s column of the table profile prints.
func summaryThroughputs(t *testing.T, stdout string) []float64 {
	t.Helper()
	var rates []float64
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		left, right, ok := strings.Cut(sc.Text(), "|")
		if !ok || strings.Contains(left, "sm %") {
			continue
		}
		f := strings.Fields(right)
		if len(f) < 2 {
			t.Fatalf("summary row %q", sc.Text())
		}
		r, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("summary row %q: %v", sc.Text(), err)
		}
		rates = append(rates, r)
	}
	return rates
}

// watchedBuffer is a testutil.Buffer that closes seen once its content
// contains marker.
type watchedBuffer struct {
	testutil.Buffer
	marker string
	seen   chan struct{}
	once   sync.Once
}

func newWatchedBuffer(marker string) *watchedBuffer {
	return &watchedBuffer{marker: marker, seen: make(chan struct{})}
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Contains(w.String(), w.marker) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

type profileBinaries struct{ faasGPU, smfn string }

// buildProfileBinaries builds faas-gpu and smfn, side by side.
func buildProfileBinaries(t *testing.T) profileBinaries {
	t.Helper()
	dir := t.TempDir()
	bins := profileBinaries{faasGPU: filepath.Join(dir, "faas-gpu"), smfn: filepath.Join(dir, "smfn")}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, b := range []struct{ out, pkg string }{{bins.faasGPU, "."}, {bins.smfn, "./local/testdata/smfn"}} {
		wg.Go(func() {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return bins
}

// profileProvider is a `faas-gpu serve` process with basic auth.
type profileProvider struct {
	cmd        *exec.Cmd
	out        *testutil.Buffer
	exited     chan struct{}
	url        string
	user, pass string
	stateDir   string
	client     *sdk.Client
}

// startProfileProvider runs faas-gpu serve on stateDir with a fresh free
// port and credentials, loading profilesDir when given, and waits until it
// answers.
func startProfileProvider(t *testing.T, bin, stateDir, profilesDir string) *profileProvider {
	t.Helper()
	secrets := t.TempDir()
	p := &profileProvider{user: "admin", pass: "s3cret-" + strconv.Itoa(os.Getpid()), stateDir: stateDir, out: &testutil.Buffer{}, exited: make(chan struct{})}
	for name, v := range map[string]string{"basic-auth-user": p.user, "basic-auth-password": p.pass} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	args := []string{"serve", "-state-dir", stateDir, "-log-format", "json", "-emulated-load-time", "50ms"}
	if profilesDir != "" {
		args = append(args, "-profiles", profilesDir)
	}
	p.cmd = exec.Command(bin, args...)
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains([]string{"port", "basic_auth", "secret_mount_path", "read_timeout", "write_timeout"}, k) {
			env = append(env, kv)
		}
	}
	p.cmd.Env = append(env, "port="+port, "basic_auth=true", "secret_mount_path="+secrets)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("---- faas-gpu serve output ----\n%s", p.output())
		}
	})
	p.url = "http://127.0.0.1:" + port
	u, _ := url.Parse(p.url)
	p.client = sdk.NewClient(u, &sdk.BasicAuth{Username: p.user, Password: p.pass}, &http.Client{Timeout: 10 * time.Second})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("faas-gpu serve exited:\n%s", p.output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("faas-gpu serve not healthy after 20s:\n%s", p.output())
		}
	}
}

func (p *profileProvider) output() string { return p.out.String() }

// stop ends the provider (SIGTERM, then SIGKILL) and waits for it.
func (p *profileProvider) stop(t *testing.T) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *profileProvider) deploy(t *testing.T, dep types.FunctionDeployment) {
	t.Helper()
	if _, err := p.client.Deploy(context.Background(), dep); err != nil {
		t.Fatalf("deploy %s: %v", dep.Service, err)
	}
}

func (p *profileProvider) waitReady(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		st, err := p.client.GetFunction(context.Background(), name, "")
		if err == nil && st.AvailableReplicas > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready after 15s", name)
}

// requireOnly fails unless exactly names are deployed.
func (p *profileProvider) requireOnly(t *testing.T, names ...string) {
	t.Helper()
	fns, err := p.client.GetFunctions(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fns {
		got = append(got, f.Name)
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("functions deployed: %v, want %v", got, names)
	}
}

// decision is the function's slice decision from /system/gpus.
func (p *profileProvider) decision(t *testing.T, name string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.url+"/system/gpus", nil)
	req.SetBasicAuth(p.user, p.pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep struct {
		Functions []struct {
			Name     string `json:"name"`
			Decision string `json:"decision"`
		} `json:"functions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("/system/gpus: %s: %v", resp.Status, err)
	}
	for _, f := range rep.Functions {
		if f.Name == name {
			return f.Decision
		}
	}
	t.Fatalf("/system/gpus has no function %s", name)
	return ""
}
