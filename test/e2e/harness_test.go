package e2e

import (
	"github.com/faas-gpu/faas-gpu/internal/testutil"

	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/openfaas/go-sdk"
)

const (
	defaultNS = "openfaas-fn"
	// poll is how often conditions are re-checked while waiting for them.
	poll = 75 * time.Millisecond
)

// creds is a basic-auth secret folder shared by the provider and the
// gateway, as in the Helm chart.
type creds struct {
	Dir, User, Password string
}

func newCreds(t *testing.T) creds {
	t.Helper()
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	c := creds{Dir: t.TempDir(), User: "admin", Password: hex.EncodeToString(b[:])}
	for name, v := range map[string]string{"basic-auth-user": c.User, "basic-auth-password": c.Password} {
		// A trailing newline, as kubectl and faasd write them: it must be trimmed.
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// proc is a process started by a test, killed by its cleanup.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *testutil.Buffer
	exited chan struct{}
	err    error // Wait's result, once exited is closed
}

func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, out: &testutil.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = childAttr()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM, 15*time.Second)
		if t.Failed() {
			t.Logf("---- output of %s (pid %d, %s) ----\n%s", name, cmd.Process.Pid, p.exitState(), p.out.Tail(48<<10))
		}
	})
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) exitState() string {
	if p.running() {
		return "running"
	}
	if p.err != nil {
		return "exited: " + p.err.Error()
	}
	return "exited: status 0"
}

// stop sends sig, then SIGKILL after grace, and waits for the exit.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// provider is one `faas-gpu serve` process.
type provider struct {
	*proc
	Port     int
	URL      string // http://127.0.0.1:PORT
	StateDir string
	Creds    creds
	// Client is go-sdk's client with credentials; Rec has the status code
	// of its last response, for the calls whose result hides it.
	Client *sdk.Client
	Rec    *statusRecorder
	HTTP   *http.Client
	opts   providerOpts // kept for restart
}

// providerOpts are what some tests change about the provider process.
type providerOpts struct {
	Dir  string   // its working folder; "" the test's
	Env  []string // added to its environment
	Args []string // added to its serve flags
}

// startProvider runs faas-gpu serve on stateDir and port (0: a free one)
// and waits until /healthz answers.
func startProvider(t *testing.T, c creds, stateDir string, port int) *provider {
	t.Helper()
	return startProviderWith(t, c, stateDir, port, providerOpts{})
}

func startProviderWith(t *testing.T, c creds, stateDir string, port int, opts providerOpts) *provider {
	t.Helper()
	bin := providerBin.get(t)
	if port == 0 {
		port = freePort(t)
	}
	cmd := exec.Command(bin, "serve",
		"-state-dir", stateDir,
		"-emulated-latency", "5ms",
		"-emulated-load-time", "200ms",
		"-log-format", "json")
	cmd.Args = append(cmd.Args, opts.Args...)
	cmd.Env = append(withoutEnv(os.Environ(), "port", "basic_auth", "secret_mount_path", "read_timeout", "write_timeout"),
		"port="+strconv.Itoa(port),
		"basic_auth=true",
		"secret_mount_path="+c.Dir,
		"read_timeout=60s",
		"write_timeout=60s",
	)
	cmd.Env = append(cmd.Env, opts.Env...)
	cmd.Dir = opts.Dir
	p := &provider{
		opts:     opts,
		proc:     startProc(t, "faas-gpu serve on port "+strconv.Itoa(port), cmd),
		Port:     port,
		URL:      "http://127.0.0.1:" + strconv.Itoa(port),
		StateDir: stateDir,
		Creds:    c,
		HTTP:     newHTTPClient(30 * time.Second),
	}
	t.Cleanup(p.HTTP.CloseIdleConnections)
	p.Client, p.Rec = newSDKClient(t, p.URL, c)
	waitHealthy(t, p.proc, p.URL+"/healthz", 30*time.Second)
	return p
}

// kill signals the provider and waits for it to exit.
func (p *provider) kill(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.stop(sig, 15*time.Second)
	p.HTTP.CloseIdleConnections()
}

// restart starts a new provider on the same state dir, port and
// credentials, stopping this one first (SIGTERM) if it still runs.
func (p *provider) restart(t *testing.T) *provider {
	t.Helper()
	if p.running() {
		p.kill(t, syscall.SIGTERM)
	}
	return startProviderWith(t, p.Creds, p.StateDir, p.Port, p.opts)
}

// logEntries are the provider's JSON log lines whose msg is msg.
func (p *provider) logEntries(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("{")) {
			continue
		}
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// processReplica is a process replica as the provider logged its start.
type processReplica struct {
	ID  string
	PID int
	URL string
}

// processReplicas lists the "replica started" log lines of process
// replicas (mode http) of function fn, oldest first.
func (p *provider) processReplicas(fn string) []processReplica {
	var out []processReplica
	for _, m := range p.logEntries("replica started") {
		if m["function"] != fn || m["mode"] != "http" {
			continue
		}
		id, _ := m["replica"].(string)
		pid, _ := m["pid"].(float64)
		u, _ := m["url"].(string)
		out = append(out, processReplica{ID: id, PID: int(pid), URL: u})
	}
	return out
}

// gpus reads GET /system/gpus.
func (p *provider) gpus(t *testing.T) gpuReport {
	t.Helper()
	r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/gpus", nil, &p.Creds, nil)
	if r.Code != http.StatusOK {
		t.Fatalf("GET /system/gpus: want 200, got %d: %s", r.Code, r.Body)
	}
	var rep gpuReport
	if err := json.Unmarshal(r.Body, &rep); err != nil {
		t.Fatalf("GET /system/gpus: not the documented JSON: %v\n%s", err, r.Body)
	}
	return rep
}

// status reads one function straight from the provider, with its code.
func (p *provider) status(t *testing.T, ns, name string) (int, functionStatus) {
	t.Helper()
	r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/function/"+name+"?namespace="+ns, nil, &p.Creds, nil)
	var st functionStatus
	if r.Code == http.StatusOK {
		if err := json.Unmarshal(r.Body, &st); err != nil {
			t.Fatalf("GET /system/function/%s: bad JSON: %v\n%s", name, err, r.Body)
		}
	}
	return r.Code, st
}

// waitReady waits until a function has at least n available replicas,
// like faas-cli ready.
func (p *provider) waitReady(t *testing.T, ns, name string, n uint64, timeout time.Duration) functionStatus {
	t.Helper()
	var st functionStatus
	eventually(t, timeout, fmt.Sprintf("%s.%s has %d available replica(s)", name, ns, n), func() (bool, string) {
		var code int
		code, st = p.status(t, ns, name)
		return code == http.StatusOK && st.AvailableReplicas >= n,
			fmt.Sprintf("HTTP %d, replicas %d, availableReplicas %d", code, st.Replicas, st.AvailableReplicas)
	})
	return st
}

// functionStatus is the subset of types.FunctionStatus the tests read,
// decoded from the JSON the provider sends.
type functionStatus struct {
	Name              string            `json:"name"`
	Image             string            `json:"image"`
	Namespace         string            `json:"namespace"`
	EnvProcess        string            `json:"envProcess"`
	EnvVars           map[string]string `json:"envVars"`
	Secrets           []string          `json:"secrets"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	Replicas          uint64            `json:"replicas"`
	AvailableReplicas uint64            `json:"availableReplicas"`
	CreatedAt         time.Time         `json:"createdAt"`
}

// gpuReport is GET /system/gpus as documented.
type gpuReport struct {
	Source   string `json:"source"`
	Emulated bool   `json:"emulated"`
	Nodes    []struct {
		Name string    `json:"name"`
		GPUs []gpuInfo `json:"gpus"`
	} `json:"nodes"`
	Pending []pendingReplica `json:"pending"`
}

type gpuInfo struct {
	UUID            string        `json:"uuid"`
	Index           int           `json:"index"`
	Product         string        `json:"product"`
	MemoryBytes     int64         `json:"memoryBytes"`
	SMCount         int           `json:"smCount"`
	SMAllocated     int           `json:"smAllocated"`
	MemoryAllocated int64         `json:"memoryAllocated"`
	Replicas        []replicaInfo `json:"replicas"`
}

type replicaInfo struct {
	ID          string `json:"id"`
	Function    string `json:"function"`
	Namespace   string `json:"namespace"`
	SMPercent   int    `json:"smPercent"`
	MemoryBytes int64  `json:"memoryBytes"`
	Ready       bool   `json:"ready"`
	// Idle is a warm replica out of service: it keeps its memory (and
	// model) but not its SM share.
	Idle     bool `json:"idle"`
	Emulated bool `json:"emulated"`
}

type pendingReplica struct {
	ID        string    `json:"id"`
	Function  string    `json:"function"`
	Namespace string    `json:"namespace"`
	Reason    string    `json:"reason"`
	Since     time.Time `json:"since"`
}

func (r gpuReport) allGPUs() []gpuInfo {
	var out []gpuInfo
	for _, n := range r.Nodes {
		out = append(out, n.GPUs...)
	}
	return out
}

// placement is where one replica sits.
type placement struct {
	Node, GPU, Function, Namespace string
	SMPercent                      int
	MemoryBytes                    int64
	Idle                           bool
}

// placements maps replica ID to its slices (a whole-GPU replica may span
// several GPUs, hence a list).
func (r gpuReport) placements() map[string][]placement {
	out := map[string][]placement{}
	for _, n := range r.Nodes {
		for _, g := range n.GPUs {
			for _, rep := range g.Replicas {
				out[rep.ID] = append(out[rep.ID], placement{Node: n.Name, GPU: g.UUID, Function: rep.Function,
					Namespace: rep.Namespace, SMPercent: rep.SMPercent, MemoryBytes: rep.MemoryBytes, Idle: rep.Idle})
			}
		}
	}
	for _, ps := range out {
		sort.Slice(ps, func(i, j int) bool { return ps[i].GPU < ps[j].GPU })
	}
	return out
}

// replicasOf lists the placed replicas of one function, in service or
// idle (warm).
func (r gpuReport) replicasOf(fn string) map[string][]placement {
	out := map[string][]placement{}
	for id, ps := range r.placements() {
		if ps[0].Function == fn {
			out[id] = ps
		}
	}
	return out
}

// servingOf lists the placed replicas of one function that are in service
// (not idle).
func (r gpuReport) servingOf(fn string) map[string][]placement {
	out := map[string][]placement{}
	for id, ps := range r.replicasOf(fn) {
		if !ps[0].Idle {
			out[id] = ps
		}
	}
	return out
}

// oversubscribed describes every GPU whose bookings exceed it, or whose
// totals disagree with its replicas; "" when all is well. Replicas in
// service hold SM and memory; idle warm ones hold only memory.
func (r gpuReport) oversubscribed() string {
	var bad []string
	for _, g := range r.allGPUs() {
		sm, mem := 0, int64(0)
		for _, rep := range g.Replicas {
			if !rep.Idle {
				sm += rep.SMPercent
			}
			mem += rep.MemoryBytes
		}
		switch {
		case g.SMAllocated > 100 || sm > 100:
			bad = append(bad, fmt.Sprintf("GPU %s: smAllocated %d%% (replicas sum %d%%) is over 100%%", g.UUID, g.SMAllocated, sm))
		case g.MemoryAllocated > g.MemoryBytes || mem > g.MemoryBytes:
			bad = append(bad, fmt.Sprintf("GPU %s: memoryAllocated %d (replicas sum %d) is over its %d bytes", g.UUID, g.MemoryAllocated, mem, g.MemoryBytes))
		case g.SMAllocated != sm || g.MemoryAllocated != mem:
			bad = append(bad, fmt.Sprintf("GPU %s: totals smAllocated %d memoryAllocated %d disagree with its replicas (%d%%, %d bytes)", g.UUID, g.SMAllocated, g.MemoryAllocated, sm, mem))
		}
	}
	return strings.Join(bad, "; ")
}

// statusRecorder keeps the status code of the last response, for go-sdk
// calls that return only an error.
type statusRecorder struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	last int
}

func (s *statusRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.last = 0
	} else {
		s.last = resp.StatusCode
	}
	return resp, err
}

// take returns the last status code and forgets it.
func (s *statusRecorder) take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.last
	s.last = 0
	return c
}

func newHTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // loopback only, whatever HTTP_PROXY says
	return &http.Client{Timeout: timeout, Transport: tr}
}

func newSDKClient(t *testing.T, base string, c creds) (*sdk.Client, *statusRecorder) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	hc := newHTTPClient(60 * time.Second)
	rec := &statusRecorder{rt: hc.Transport}
	hc.Transport = rec
	t.Cleanup(hc.CloseIdleConnections)
	return sdk.NewClient(u, &sdk.BasicAuth{Username: c.User, Password: c.Password}, hc), rec
}

// result is one HTTP exchange.
type result struct {
	Code   int
	Header http.Header
	Body   []byte
}

func (r result) String() string {
	return fmt.Sprintf("HTTP %d %q", r.Code, truncate(string(r.Body), 300))
}

func do(c *http.Client, method, u string, body []byte, auth *creds, hdr map[string]string) (result, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return result{}, err
	}
	if auth != nil {
		req.SetBasicAuth(auth.User, auth.Password)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, fmt.Errorf("%s %s: reading the body: %w", method, u, err)
	}
	return result{Code: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

func mustDo(t *testing.T, c *http.Client, method, u string, body []byte, auth *creds, hdr map[string]string) result {
	t.Helper()
	r, err := do(c, method, u, body, auth, hdr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return r
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventually polls cond until it holds, failing the test at the deadline
// with what it was waiting for and the last state seen.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for: %s\nlast seen: %s", timeout, what, last)
		}
		time.Sleep(poll)
	}
}

// waitHealthy polls url until 200, failing at once if the process exits.
func waitHealthy(t *testing.T, p *proc, u string, timeout time.Duration) {
	t.Helper()
	c := newHTTPClient(2 * time.Second)
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		if !p.running() {
			t.Fatalf("%s exited before %s answered (%s):\n%s", p.name, u, p.exitState(), p.out.Tail(16<<10))
		}
		r, err := do(c, http.MethodGet, u, nil, nil, nil)
		if err == nil && r.Code == http.StatusOK {
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = r.String()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer 200 within %s; last: %s\n%s", p.name, u, timeout, last, p.out.Tail(16<<10))
		}
		time.Sleep(poll)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := testutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// answers is true when something accepts TCP connections at a replica URL.
func answers(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func withoutEnv(env []string, names ...string) []string {
	drop := map[string]bool{}
	for _, n := range names {
		drop[n] = true
	}
	out := env[:0:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// sdkNotFound is how go-sdk reports a 404 on DELETE and scale.
func sdkNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "not found")
}
