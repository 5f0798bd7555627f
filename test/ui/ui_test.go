// Package ui_test loads the GPU map page (/ui/) in a real browser, Debian's
// headless Chromium, against a local provider with functions deployed, and
// checks what the page rendered against /system/gpus.
//
// Chromium comes from the distribution (apt-get install chromium). Without
// it the test skips, unless CI is set: then it fails. Screenshots and the
// rendered DOM are written to $FAAS_GPU_ARTIFACTS when set, else to a
// temporary folder; -update-docs copies the screenshot to docs/gpu-map.png.
package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/gorilla/mux"
	bootstrap "github.com/openfaas/faas-provider"
	"github.com/openfaas/faas-provider/auth"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

var updateDocs = flag.Bool("update-docs", false, "copy the populated map's screenshot to docs/gpu-map.png")

const (
	user     = "admin"
	password = "s3cr3t-pa55"
)

// ---------------------------------------------------------------- browser

// chromiumPath finds Debian's chromium (or a chrome on PATH). Missing, the
// test fails under CI and skips elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "headless Chromium is needed for the GPU map browser test: apt-get install -y chromium (or set CHROMIUM=/path/to/chrome)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; skipped because CI is not set")
	return ""
}

type browser struct {
	t    *testing.T
	path string
}

// run starts one headless Chromium with the flags this machine needs (no
// sandbox as root, no GPU, no background network: the machine has no
// outside network) and a fresh profile, and returns its stdout.
func (b browser) run(args ...string) []byte {
	b.t.Helper()
	profile, err := os.MkdirTemp("", "faas-gpu-chromium-")
	if err != nil {
		b.t.Fatal(err)
	}
	// Chromium's helpers may still write there for a moment after it exits;
	// t.TempDir would fail the test on that.
	defer os.RemoveAll(profile)
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage",
		"--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir=" + profile,
	}
	ctx, cancel := context.WithTimeout(b.t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.path, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		b.t.Fatalf("chromium %s: %v\nstderr:\n%s", strings.Join(args, " "), err, tail(stderr.String(), 3000))
	}
	return stdout.Bytes()
}

// dom loads url, lets the page's fetch finish (virtual time waits for
// pending network requests) and returns the DOM it rendered.
func (b browser) dom(url string) (string, *node) {
	b.t.Helper()
	out := b.run("--virtual-time-budget=5000", "--dump-dom", url)
	doc, err := parseDOM(string(out))
	if err != nil {
		b.t.Fatalf("parse the DOM chromium dumped: %v\n%s", err, tail(string(out), 3000))
	}
	return string(out), doc
}

// screenshot saves a PNG of url, in a window of size "W,H", to file.
func (b browser) screenshot(url, size, file string) {
	b.t.Helper()
	b.run("--virtual-time-budget=5000", "--window-size="+size, "--screenshot="+file, url)
	png, err := os.ReadFile(file)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		b.t.Fatalf("chromium wrote no PNG to %s: %v", file, err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FAAS_GPU_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, "gpu-map")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ---------------------------------------------------------------- provider

// provider is the local backend behind the routes and basic auth main.go
// gives it (bootstrap.Serve owns a process-wide router, so the handlers are
// wired here as in handlers/handlers_test.go).
type provider struct {
	t       *testing.T
	srv     *httptest.Server
	backend *local.Backend
}

func inventory() gpu.Inventory {
	inv := gpu.BuiltinInventory("node-a")
	inv.Nodes = append(inv.Nodes, gpu.Node{Name: "node-b", GPUs: []gpu.Device{{
		UUID: "GPU-00000000-faa5-0000-0000-0000000000b0", Node: "node-b", Index: 0,
		Product: "Tesla T4", MemoryBytes: 15 << 30, SMCount: 40,
	}}})
	return inv
}

func startProvider(t *testing.T, inv gpu.Inventory) *provider {
	t.Helper()
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	b, err := local.New(local.Config{
		StateDir:  t.TempDir(),
		Inventory: inv,
		Profiles:  store,
		Emulation: local.Emulation{Latency: time.Millisecond, LoadTime: time.Millisecond},
		Log:       zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	srv := serve(t, b)
	return &provider{t: t, srv: srv, backend: b}
}

// serve wires the page, /system/gpus and, for a real backend, the routes
// that deploy, scale and invoke, all but invocations behind basic auth.
func serve(t *testing.T, b handlers.GPUReporter) *httptest.Server {
	t.Helper()
	creds := &auth.BasicAuthCredentials{User: user, Password: password}
	protect := func(h http.HandlerFunc) http.HandlerFunc { return auth.DecorateWithBasicAuth(h, creds) }
	// The proxy's measurements, which /system/gpus reports, as in main.go.
	metrics := handlers.NewProxyMetrics(prometheus.NewRegistry())
	r := mux.NewRouter()
	r.PathPrefix("/ui").Handler(protect(handlers.MakeUIHandler()))
	r.HandleFunc("/system/gpus", protect(handlers.MakeGPUsHandler(b, metrics))).Methods(http.MethodGet)
	if fb, ok := b.(*local.Backend); ok {
		log := zap.NewNop()
		inv := &handlers.Invocations{}
		name := "{name:[" + bootstrap.NameExpression + "]+}"
		r.HandleFunc("/system/functions", protect(handlers.MakeDeployHandler(fb, log))).Methods(http.MethodPost)
		r.HandleFunc("/system/scale-function/"+name, protect(handlers.MakeScaleHandler(fb, log))).Methods(http.MethodPost)
		r.HandleFunc("/system/function/"+name, protect(handlers.MakeStatusHandler(fb, inv))).Methods(http.MethodGet)
		proxy := handlers.MakeProxyHandler(fb, inv, handlers.ProxyOptions{Timeout: 10 * time.Second, Metrics: metrics}, log)
		r.HandleFunc("/function/"+name, proxy)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

// pageURL is the page with the credentials in the URL: Chromium logs in
// with them and re-sends them, from its auth cache, on the page's fetch.
func pageURL(srv *httptest.Server, withAuth bool) string {
	u, _ := url.Parse(srv.URL + "/ui/")
	if withAuth {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

func (p *provider) do(method, path, body string, want int) []byte {
	p.t.Helper()
	req, err := http.NewRequest(method, p.srv.URL+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.SetBasicAuth(user, password)
	resp, err := p.srv.Client().Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		p.t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, out, want)
	}
	return out
}

func (p *provider) deploy(name string, annotations map[string]string) {
	p.t.Helper()
	p.deployProcess(name, "", annotations)
}

// deployProcess deploys a function whose replicas run process per request
// (the classic watchdog) instead of an emulated GPU worker.
func (p *provider) deployProcess(name, process string, annotations map[string]string) {
	p.t.Helper()
	body, _ := json.Marshal(map[string]any{"service": name, "image": "example/" + name + ":1", "envProcess": process, "annotations": annotations})
	p.do(http.MethodPost, "/system/functions", string(body), http.StatusAccepted)
}

func (p *provider) scale(name string, n int) {
	p.t.Helper()
	p.do(http.MethodPost, "/system/scale-function/"+name, fmt.Sprintf(`{"serviceName":%q,"replicas":%d}`, name, n), http.StatusAccepted)
}

func (p *provider) report() (scheduler.ClusterReport, []byte) {
	p.t.Helper()
	raw := p.do(http.MethodGet, "/system/gpus", "", http.StatusOK)
	var rep scheduler.ClusterReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		p.t.Fatalf("/system/gpus: %v", err)
	}
	return rep, raw
}

// settle waits until every placed replica in service is ready, so the
// report the test reads is the one the browser gets.
func (p *provider) settle() scheduler.ClusterReport {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, raw := p.report()
		ready := true
		for _, n := range rep.Nodes {
			for _, g := range n.GPUs {
				for _, r := range g.Replicas {
					ready = ready && (r.Idle || r.Ready)
				}
			}
		}
		for _, f := range rep.Functions {
			ready = ready && f.Ready == f.Replicas-f.Pending
		}
		if ready {
			return rep
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("replicas not ready after 20s: %s", raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *provider) invoke(name string, n int) {
	p.t.Helper()
	for range n {
		p.do(http.MethodPost, "/function/"+name, "x", http.StatusOK)
	}
}

// ---------------------------------------------------------------- formats
// The page's formats, as the user reads them.

const gib = 1 << 30

func pct(n int) string { return strconv.Itoa(n) + " %" }

func gibs(b int64) string { return strconv.FormatFloat(float64(b)/gib, 'f', 1, 64) }

func gibCap(b int64) string {
	g := float64(b) / gib
	if math.Abs(g-math.Round(g)) < 0.05 {
		return strconv.Itoa(int(math.Round(g)))
	}
	return strconv.FormatFloat(g, 'f', 1, 64)
}

func bytesText(b int64) string {
	if b >= gib {
		return gibs(b) + " GiB"
	}
	return strconv.Itoa(int(math.Round(float64(b)/(1<<20)))) + " MiB"
}

// msText is the page's latency format, milliseconds as precise as a
// reader needs, without trailing zeros.
func msText(v float64) string {
	trim := func(x float64, digits int) string {
		s, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
		return strconv.FormatFloat(s, 'f', -1, 64)
	}
	switch {
	case v >= 10000:
		return trim(v/1000, 1) + " s"
	case v >= 100:
		return strconv.Itoa(int(math.Round(v))) + " ms"
	case v >= 10:
		return trim(v, 1) + " ms"
	}
	return trim(v, 2) + " ms"
}

func shareText(r float64) string {
	r *= 100
	switch {
	case r == 0:
		return "0 %"
	case r < 0.1:
		return "< 0.1 %"
	case r < 1:
		return strconv.FormatFloat(r, 'f', 1, 64) + " %"
	}
	return strconv.Itoa(int(math.Round(r))) + " %"
}

// startupText is the page's format of a replica's start-up, from seconds:
// < 1 ms, 340 ms, 2.3 s, 12 s, 1 min 12 s.
func startupText(s float64) string {
	msec := math.Round(s * 1000)
	switch {
	case msec < 1:
		return "< 1 ms"
	case msec < 1000:
		return strconv.Itoa(int(msec)) + " ms"
	case s < 59.95:
		tenths, _ := strconv.ParseFloat(strconv.FormatFloat(s, 'f', 1, 64), 64)
		return strconv.FormatFloat(tenths, 'f', -1, 64) + " s"
	}
	whole := int(math.Round(s))
	out := strconv.Itoa(whole/60) + " min"
	if whole%60 != 0 {
		out += " " + strconv.Itoa(whole%60) + " s"
	}
	return out
}

var startupUnitRE = regexp.MustCompile(`^([0-9.]+) (ms|s)$`)

// startupRangeText is the page's start-up of alike replicas listed as one
// line: one value, or the range of theirs (1.2–2.3 s, 340 ms – 2.3 s).
func startupRangeText(values []float64) string {
	v := slices.Sorted(slices.Values(values))
	lo, hi := startupText(v[0]), startupText(v[len(v)-1])
	if lo == hi {
		return lo
	}
	ml, mh := startupUnitRE.FindStringSubmatch(lo), startupUnitRE.FindStringSubmatch(hi)
	if ml != nil && mh != nil && ml[2] == mh[2] {
		return ml[1] + "–" + hi
	}
	return lo + " – " + hi
}

// startupWant is what a replica line says of its replicas' start-up: the
// state badge's text, and the note beside it (warm idle replicas only).
func startupWant(state string, rs []scheduler.ReplicaReport) (badge, note string) {
	var after []float64
	for _, r := range rs {
		if r.ReadyAfterSeconds != nil {
			after = append(after, *r.ReadyAfterSeconds)
		}
	}
	switch {
	case state == "starting":
		return "starting…", ""
	case state == "ready" && len(after) > 0:
		return "ready after " + startupRangeText(after), ""
	case state == "ready":
		return "ready", ""
	}
	idle := "warm idle"
	if rs[0].Standby {
		idle = "standby"
	}
	if len(after) > 0 {
		return idle, "started in " + startupRangeText(after)
	}
	return idle, ""
}

// near reads the number the page shows at the start of text ("12.3 ms",
// "0.85 req/s", "1.5 s" in ms) and says whether it is want, give or take
// the page's rounding. Comparing numbers, not strings, spares the test
// JavaScript's and Go's different rounding of exact ties.
func near(text string, want float64) bool {
	v, slack, ok := shown(text)
	return ok && math.Abs(v-want) <= slack
}

// shown is the number at the start of text, in ms when its unit is s, and
// half a unit of its last digit.
func shown(text string) (v, slack float64, ok bool) {
	f := strings.Fields(text)
	if len(f) < 2 {
		return 0, 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, 0, false
	}
	digits := 0
	if _, frac, ok := strings.Cut(f[0], "."); ok {
		digits = len(frac)
	}
	slack = 0.5*math.Pow(10, -float64(digits)) + 1e-9
	if f[1] == "s" {
		v, slack = v*1000, slack*1000
	}
	return v, slack, true
}

// sloState is the page's judgement of a function's last minute: ok or
// miss against its SLO, none without one, idle without requests.
func sloState(f scheduler.FunctionReport) string {
	m := f.Measured
	switch {
	case m == nil || m.Requests == 0:
		return "idle"
	case f.SLO == "" || m.SLOMs == 0:
		return "none"
	case m.P95Ms > m.SLOMs || (m.SLOViolationRatio != nil && *m.SLOViolationRatio > 0.05):
		return "miss"
	}
	return "ok"
}

func rateText(r float64) string {
	switch {
	case r == 0:
		return "0 req/s"
	case r < 1:
		return strconv.FormatFloat(r, 'f', 2, 64) + " req/s"
	case r < 100:
		return strconv.FormatFloat(r, 'f', 1, 64) + " req/s"
	}
	return strconv.Itoa(int(math.Round(r))) + " req/s"
}

// ---------------------------------------------------------------- checks

// checkMap compares the rendered page with the report, GPU by GPU and
// function by function.
func checkMap(t *testing.T, doc *node, rep scheduler.ClusterReport) {
	t.Helper()
	body := doc.First(byTag("body"))
	if body == nil || body.Attr["data-state"] != "ok" {
		t.Fatalf("page state = %q, want ok (error: %q)", body.Attr["data-state"], doc.First(byID("error")).Text())
	}
	if e := doc.First(byID("error")); e == nil {
		t.Error("no error region")
	} else if _, hidden := e.Attr["hidden"]; !hidden {
		t.Errorf("error shown: %q", e.Text())
	}
	if h1 := doc.First(byTag("h1")); h1 == nil || !strings.Contains(h1.Text(), "GPU map") {
		t.Error("no h1 GPU map")
	}

	colour := map[string]string{} // function -> --c of its segments
	gpus := 0
	for _, n := range rep.Nodes {
		sec := doc.First(byAttr("section", "data-node", n.Name))
		if sec == nil {
			t.Errorf("node %s: no section", n.Name)
			continue
		}
		if h := sec.First(byTag("h3")); h == nil || h.Text() != fmt.Sprintf("Node %s · %d GPU%s", n.Name, len(n.GPUs), map[bool]string{true: "", false: "s"}[len(n.GPUs) == 1]) {
			t.Errorf("node %s: heading %q", n.Name, h.Text())
		}
		for _, g := range n.GPUs {
			gpus++
			card := sec.First(byAttr("article", "data-uuid", g.UUID))
			if card == nil {
				t.Errorf("GPU %s: no card", g.UUID)
				continue
			}
			name := fmt.Sprintf("GPU %d", g.Index)
			if h := card.First(byTag("h4")); h == nil || h.Text() != fmt.Sprintf("GPU %d · %s", g.Index, g.Product) {
				t.Errorf("%s: heading %q", name, h.Text())
			}
			wantTotals := fmt.Sprintf("%s SM · %s / %s GiB", pct(g.SMAllocated), gibs(g.MemoryAllocated), gibCap(g.MemoryBytes))
			if tot := card.First(byClass("p", "gpu-totals")); tot == nil || tot.Text() != wantTotals {
				t.Errorf("%s: totals %q, want %q", name, tot.Text(), wantTotals)
			}
			bars := card.All(byClass("div", "bar"))
			if len(bars) != 2 {
				t.Errorf("%s: %d bars, want SM and memory", name, len(bars))
				continue
			}
			sm, mem := bars[0], bars[1]
			for _, bar := range bars {
				if bar.Attr["role"] != "img" || bar.Attr["aria-label"] == "" {
					t.Errorf("%s: bar without role=img and an aria-label: %v", name, bar.Attr)
				}
			}
			if !strings.HasPrefix(sm.Attr["aria-label"], "SM: "+pct(g.SMAllocated)+" of 100 % booked") {
				t.Errorf("%s: SM bar label %q", name, sm.Attr["aria-label"])
			}
			if !strings.HasPrefix(mem.Attr["aria-label"], "Memory: "+gibs(g.MemoryAllocated)+" of "+gibCap(g.MemoryBytes)+" GiB reserved") {
				t.Errorf("%s: memory bar label %q", name, mem.Attr["aria-label"])
			}
			free := card.All(byClass("span", "bar-free"))
			if len(free) != 2 || free[0].Text() != pct(100-g.SMAllocated)+" free" || free[1].Text() != gibs(g.MemoryBytes-g.MemoryAllocated)+" GiB free" {
				t.Errorf("%s: free texts %v", name, texts(free))
			}

			smSegs := map[string]*node{}
			for _, s := range sm.All(byClass("div", "seg")) {
				smSegs[s.Attr["data-replica"]] = s
			}
			memSegs := map[string]*node{}
			for _, s := range mem.All(byClass("div", "seg")) {
				memSegs[s.Attr["data-replica"]] = s
			}
			items := map[string]*node{}
			for _, li := range card.All(byTag("li")) {
				for _, id := range strings.Fields(li.Attr["data-replicas"]) {
					items[id] = li
				}
			}
			wantSM, smSum := 0, 0
			for _, r := range g.Replicas {
				state := "ready"
				switch {
				case r.Idle:
					state = "idle"
				case !r.Ready:
					state = "starting"
				}
				// SM bar: replicas in service only, as wide as their SM %.
				s := smSegs[r.ID]
				if r.Idle {
					if s != nil {
						t.Errorf("%s: warm idle replica %s drawn on the SM bar", name, r.ID)
					}
				} else {
					wantSM++
					smSum += r.SMPercent
					if s == nil {
						t.Errorf("%s: replica %s (%s) missing from the SM bar", name, r.ID, r.Function)
					} else {
						checkSegment(t, name+" SM", s, r, state, float64(r.SMPercent))
						if c := styleProp(s, "--c"); colour[r.Function] == "" {
							colour[r.Function] = c
						} else if colour[r.Function] != c {
							t.Errorf("function %s drawn in two colours: %s and %s", r.Function, colour[r.Function], c)
						}
					}
				}
				// Memory bar: every replica, warm idle ones too.
				if s := memSegs[r.ID]; s == nil {
					t.Errorf("%s: replica %s (%s) missing from the memory bar", name, r.ID, r.Function)
				} else {
					checkSegment(t, name+" memory", s, r, state, 100*float64(r.MemoryBytes)/float64(g.MemoryBytes))
				}
				// The list under the bars, in words.
				li := items[r.ID]
				if li == nil {
					t.Errorf("%s: replica %s not listed", name, r.ID)
					continue
				}
				txt := li.Text()
				stateText := map[string]string{"ready": "ready", "starting": "starting", "idle": "warm idle"}[state]
				if r.Standby {
					stateText = "standby"
				}
				for _, want := range append([]string{r.Function, pct(r.SMPercent) + " SM · " + bytesText(r.MemoryBytes), stateText}, r.Models...) {
					if !strings.Contains(txt, want) {
						t.Errorf("%s: replica %s listed as %q, missing %q", name, r.ID, txt, want)
					}
				}
				if li.Attr["data-state"] != state {
					t.Errorf("%s: replica %s listed as %s, want %s", name, r.ID, li.Attr["data-state"], state)
				}
			}
			// Each line's start-up against readyAfterSeconds of the
			// replicas it lists.
			for _, li := range card.All(byTag("li")) {
				var rs []scheduler.ReplicaReport
				for _, id := range strings.Fields(li.Attr["data-replicas"]) {
					if i := slices.IndexFunc(g.Replicas, func(r scheduler.ReplicaReport) bool { return r.ID == id }); i >= 0 {
						rs = append(rs, g.Replicas[i])
					}
				}
				if len(rs) == 0 {
					t.Errorf("%s: line %q lists no replica of the GPU", name, li.Text())
					continue
				}
				wantBadge, wantNote := startupWant(li.Attr["data-state"], rs)
				if b := li.First(byClass("span", "state")); b == nil || b.Text() != wantBadge {
					t.Errorf("%s: line %q: state %v, want %q", name, li.Text(), b, wantBadge)
				}
				note := ""
				if n := li.First(byClass("span", "startup")); n != nil {
					note = n.Text()
				}
				if note != wantNote {
					t.Errorf("%s: line %q: start-up note %q, want %q", name, li.Text(), note, wantNote)
				}
			}
			if len(smSegs) != wantSM || len(memSegs) != len(g.Replicas) {
				t.Errorf("%s: %d SM and %d memory segments, want %d and %d", name, len(smSegs), len(memSegs), wantSM, len(g.Replicas))
			}
			if smSum != g.SMAllocated {
				t.Errorf("%s: replicas in service book %d%% SM, the GPU says %d%%", name, smSum, g.SMAllocated)
			}
		}
	}
	// Functions tell apart: one colour each (the page has 22).
	seen := map[string]string{}
	for fn, c := range colour {
		if other, ok := seen[c]; ok && len(colour) <= 22 {
			t.Errorf("functions %s and %s share the colour %s", fn, other, c)
		}
		seen[c] = fn
	}
	if n := len(doc.All(byClass("article", "gpu"))); n != gpus {
		t.Errorf("%d GPU cards, want %d", n, gpus)
	}

	// Pending replicas with their reason.
	if h := doc.First(byID("pending-h")); h == nil || h.Text() != fmt.Sprintf("Pending replicas (%d)", len(rep.Pending)) {
		t.Errorf("pending heading %q", h.Text())
	}
	pend := doc.First(byID("pending"))
	for _, p := range rep.Pending {
		row := pend.First(byAttr("tr", "data-replica", p.ID))
		if row == nil {
			t.Errorf("pending replica %s (%s) not listed", p.ID, p.Function)
			continue
		}
		if txt := row.Text(); !strings.Contains(txt, p.Function) || !strings.Contains(txt, p.Reason) {
			t.Errorf("pending row %q, want %s and its reason %q", txt, p.Function, p.Reason)
		}
	}
	if len(rep.Pending) == 0 && !strings.Contains(pend.Text(), "None: every replica has a GPU.") {
		t.Errorf("no pending replicas, page says %q", pend.Text())
	}

	// Functions: rate, SLO, replica counts, decision.
	fns := doc.First(byID("functions"))
	legend := doc.First(byID("legend-functions"))
	for _, f := range rep.Functions {
		row := fns.First(byAttr("tr", "data-function", f.Name))
		if row == nil {
			t.Errorf("function %s not in the table", f.Name)
			continue
		}
		txt := row.Text()
		slo := f.SLO
		if slo == "" {
			slo = "none"
		}
		want := []string{f.Name, f.Model, pct(f.SMPercent) + " SM", "batch " + strconv.Itoa(max(f.Batch, 1)), slo,
			rateText(f.Rate), fmt.Sprintf("%d / %d ready", f.Ready, f.Replicas), f.Decision}
		if f.MemoryBytes > 0 {
			want = append(want, bytesText(f.MemoryBytes))
		}
		if f.Idle > 0 {
			want = append(want, fmt.Sprintf("%d warm idle", f.Idle))
		}
		if f.Pending > 0 {
			want = append(want, fmt.Sprintf("%d pending", f.Pending))
		}
		for _, w := range want {
			if !strings.Contains(txt, w) {
				t.Errorf("function %s row %q: missing %q", f.Name, txt, w)
			}
		}
		if legend.First(byAttr("span", "data-function", f.Name)) == nil {
			t.Errorf("function %s not in the legend", f.Name)
		}
		checkMeasured(t, row, f)
	}
	if len(rep.Functions) == 0 && !strings.Contains(fns.Text(), "No functions deployed yet.") {
		t.Errorf("no functions, page says %q", fns.Text())
	}

	// Totals.
	desired, ready, idle := 0, 0, 0
	for _, f := range rep.Functions {
		desired, ready, idle = desired+f.Replicas, ready+f.Ready, idle+f.Idle
	}
	wantReplicas := fmt.Sprintf("%d ready of %d desired · %d warm idle · %d pending", ready, desired, idle, len(rep.Pending))
	if tile := doc.First(byAttr("div", "data-total", "replicas")); tile == nil || !strings.Contains(tile.Text(), wantReplicas) {
		t.Errorf("replica totals %q, want %q", tile.Text(), wantReplicas)
	}
	wantCache := fmt.Sprintf("%d GPU hits · %d node hits · %d misses", rep.Cache.Hits, rep.Cache.NodeHits, rep.Cache.Misses)
	if tile := doc.First(byAttr("div", "data-total", "cache")); tile == nil || !strings.Contains(tile.Text(), wantCache) {
		t.Errorf("cache totals %q, want %q", tile.Text(), wantCache)
	}
}

// checkMeasured compares a function's row with what the proxy measured
// of its last minute. The page fetched the report a moment after the
// test: the counts and latencies are the same (nothing was invoked in
// between), the window is a little longer and the rate a little lower.
func checkMeasured(t *testing.T, row *node, f scheduler.FunctionReport) {
	t.Helper()
	state := sloState(f)
	if got := row.Attr["data-slo"]; got != state {
		t.Errorf("function %s marked %q, want %q (measured %+v)", f.Name, got, state, f.Measured)
	}
	if miss := row.HasClass("slo-miss"); miss != (state == "miss") {
		t.Errorf("function %s: row class %q, state %s", f.Name, row.Attr["class"], state)
	}
	rateCell, latCell := row.First(byClass("td", "rate")), row.First(byClass("td", "latency"))
	if rateCell == nil || latCell == nil {
		t.Fatalf("function %s: no rate or latency cell", f.Name)
	}
	m := f.Measured
	if m == nil {
		for _, c := range []*node{rateCell, latCell} {
			if !strings.Contains(c.Text(), "no requests in the last minute") {
				t.Errorf("function %s without requests: %q", f.Name, c.Text())
			}
		}
		return
	}
	// Rate: the requests over a window at least as long as when the test
	// read it (or, had a sub-window left since, 50 s) and at most a minute.
	rt := rateCell.Text()
	if !between(rt, float64(m.Requests)/60, max(m.Rate, float64(m.Requests)/50)) {
		t.Errorf("function %s: rate %q, want about %s", f.Name, rt, rateText(m.Rate))
	}
	reqs := fmt.Sprintf("%d request%s in ", m.Requests, map[bool]string{true: "", false: "s"}[m.Requests == 1])
	if !strings.Contains(rt, reqs) {
		t.Errorf("function %s: rate cell %q, want %q", f.Name, rt, reqs)
	}
	// Latency: p50 and p95 as measured.
	q := latCell.First(byClass("span", "quantiles"))
	if q == nil {
		t.Fatalf("function %s: no quantiles in %q", f.Name, latCell.Text())
	}
	p50, p95, ok := strings.Cut(strings.TrimPrefix(q.Text(), "p50 "), " · p95 ")
	if !ok || !near(p50, m.P50Ms) || !near(p95, m.P95Ms) {
		t.Errorf("function %s: %q, want p50 %s · p95 %s", f.Name, q.Text(), msText(m.P50Ms), msText(m.P95Ms))
	}
	lt := latCell.Text()
	switch state {
	case "none":
		if !strings.Contains(lt, "no SLO to meet") {
			t.Errorf("function %s without an SLO: %q", f.Name, lt)
		}
	case "ok", "miss":
		badge := map[string]string{"ok": "✓ meets SLO", "miss": "✗ misses SLO"}[state]
		if b := latCell.First(byClass("span", "slo")); b == nil || b.Text() != badge || !b.HasClass(state) {
			t.Errorf("function %s: SLO badge %v, want %q", f.Name, b, badge)
		}
		over := fmt.Sprintf("%s over %s or failed (%d of %d)", shareText(*m.SLOViolationRatio), msText(m.SLOMs), *m.SLOViolations, m.Requests)
		if !strings.Contains(lt, over) {
			t.Errorf("function %s: %q, want %q", f.Name, lt, over)
		}
	}
}

// between says whether the number the page shows at the start of text is
// within [lo, hi], give or take its rounding.
func between(text string, lo, hi float64) bool {
	v, slack, ok := shown(text)
	return ok && v >= lo-slack && v <= hi+slack
}

func checkSegment(t *testing.T, where string, s *node, r scheduler.ReplicaReport, state string, wantWidth float64) {
	t.Helper()
	if s.Attr["data-function"] != r.Function || s.Attr["data-state"] != state || !s.HasClass(state) {
		t.Errorf("%s: segment of %s = function %q state %q class %q, want %s %s", where, r.ID, s.Attr["data-function"], s.Attr["data-state"], s.Attr["class"], r.Function, state)
	}
	w := strings.TrimSuffix(styleProp(s, "width"), "%")
	got, err := strconv.ParseFloat(w, 64)
	if err != nil || math.Abs(got-wantWidth) > 0.01 {
		t.Errorf("%s: segment of %s is %q wide, want %.3f%%", where, r.ID, styleProp(s, "width"), wantWidth)
	}
	if styleProp(s, "--c") == "" {
		t.Errorf("%s: segment of %s has no colour", where, r.ID)
	}
	if !strings.Contains(s.Attr["title"], r.ID) {
		t.Errorf("%s: segment of %s has no tooltip naming it: %q", where, r.ID, s.Attr["title"])
	}
}

func texts(ns []*node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Text())
	}
	return out
}

func save(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------- tests

// TestGPUMapInChromium: the empty map, then several functions (different
// slices, one warm after a scale to zero, one pending), each checked
// against /system/gpus as the browser rendered it.
func TestGPUMapInChromium(t *testing.T) {
	b := browser{t: t, path: chromiumPath(t)}
	dir := artifacts(t)
	p := startProvider(t, inventory())

	t.Run("empty", func(t *testing.T) {
		b.t = t
		rep := p.settle()
		html, doc := b.dom(pageURL(p.srv, true))
		save(t, dir, "empty.html", []byte(html))
		checkMap(t, doc, rep)
		for _, card := range doc.All(byClass("article", "gpu")) {
			if !strings.Contains(card.Text(), "No replicas: the whole GPU is free.") {
				t.Errorf("empty GPU card says %q", card.Text())
			}
		}
	})
	if t.Failed() {
		return
	}

	// Several functions, each GPU shared: bert-qa's two 40 % replicas with
	// resnet50 (its slice chosen by its profile for a 100 ms SLO), whisper
	// on a whole GPU, ocr with yolo, then ocr scaled to zero (its replica
	// stays warm), and sdxl, which needs 80 % SM no GPU has free. detector
	// has a 50 ms SLO its replica (a process sleeping 150 ms per request)
	// always misses.
	p.deploy("bert-qa", map[string]string{"com.openfaas.gpu.sm": "40", "com.openfaas.gpu.memory": "6Gi", "com.openfaas.gpu.model": "bert-base"})
	p.scale("bert-qa", 2)
	p.deploy("resnet50", map[string]string{"com.openfaas.gpu.model": "resnet50", "com.openfaas.gpu.slo": "100ms"})
	p.deploy("whisper", map[string]string{"com.openfaas.gpu.sm": "100", "com.openfaas.gpu.memory": "12Gi"})
	p.deploy("ocr", map[string]string{"com.openfaas.gpu.sm": "20", "com.openfaas.gpu.memory": "2Gi"})
	p.deploy("yolo", map[string]string{"com.openfaas.gpu.sm": "30", "com.openfaas.gpu.memory": "4Gi"})
	p.deployProcess("detector", "sleep 0.15", map[string]string{"com.openfaas.gpu.model": "mobilenet_v3_large", "com.openfaas.gpu.slo": "50ms"})
	p.settle()
	// Traffic, and two autoscaler passes 5 s apart (in the backend's time)
	// to turn it into request rates.
	t0 := time.Now()
	p.backend.Tick(t0)
	p.invoke("ocr", 2)
	p.invoke("bert-qa", 40)
	p.invoke("resnet50", 60)
	p.invoke("yolo", 12)
	p.invoke("whisper", 5)
	p.invoke("detector", 10)
	p.backend.Tick(t0.Add(5 * time.Second))
	p.scale("ocr", 0)
	p.deploy("sdxl", map[string]string{"com.openfaas.gpu.sm": "80", "com.openfaas.gpu.memory": "10Gi"})
	rep := p.settle()
	_, raw := p.report()
	save(t, dir, "gpus.json", raw)

	// The scenario is what the test says it is.
	var warm, pendingSDXL bool
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				warm = warm || (r.Function == "ocr" && r.Idle)
			}
		}
	}
	for _, pe := range rep.Pending {
		pendingSDXL = pendingSDXL || pe.Function == "sdxl" && pe.Reason != ""
	}
	fnReport, measured := map[string]scheduler.FunctionReport{}, map[string]*scheduler.MeasuredLatency{}
	for _, f := range rep.Functions {
		fnReport[f.Name], measured[f.Name] = f, f.Measured
	}
	// The proxy measured what the test sent: resnet50 (its emulated
	// replica answers in its profiled batch latency, 42 ms) meets its
	// 100 ms SLO but for the odd cold model load; detector misses its
	// 50 ms one every time.
	if m := measured["resnet50"]; m == nil || m.Requests != 60 || m.SLOMs != 100 || *m.SLOViolations > 3 || sloState(fnReport["resnet50"]) != "ok" {
		t.Fatalf("resnet50 measured %+v, want its 60 requests within the 100 ms SLO: %s", m, raw)
	}
	if m := measured["detector"]; m == nil || m.Requests != 10 || m.SLOMs != 50 || *m.SLOViolations != 10 || *m.SLOViolationRatio != 1 || m.P50Ms < 150 {
		t.Fatalf("detector measured %+v, want its 10 requests all over the 50 ms SLO: %s", m, raw)
	}
	if measured["sdxl"] != nil {
		t.Fatalf("sdxl, never invoked, measured %+v", measured["sdxl"])
	}
	if !warm || !pendingSDXL || len(rep.Functions) != 7 {
		t.Fatalf("scenario not set up (ocr warm %v, sdxl pending %v, %d functions): %s", warm, pendingSDXL, len(rep.Functions), raw)
	}

	// A ready replica the page must give the start-up of: whisper's, on
	// a line of its own, ready once placed (emulated).
	var timed *scheduler.ReplicaReport
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for i, r := range g.Replicas {
				if timed == nil && r.Function == "whisper" && r.Ready && r.ReadyAfterSeconds != nil {
					timed = &g.Replicas[i]
				}
			}
		}
	}
	if timed == nil {
		t.Fatalf("no ready whisper replica with readyAfterSeconds: %s", raw)
	}

	t.Run("functions", func(t *testing.T) {
		b.t = t
		start := time.Now()
		html, doc := b.dom(pageURL(p.srv, true))
		t.Logf("chromium rendered the map in %s", time.Since(start).Round(time.Millisecond))
		save(t, dir, "map.html", []byte(html))
		checkMap(t, doc, rep)
		// Its line says how long it took to become ready.
		wantReady := "ready after " + startupText(*timed.ReadyAfterSeconds)
		li := doc.First(func(n *node) bool {
			return n.Tag == "li" && slices.Contains(strings.Fields(n.Attr["data-replicas"]), timed.ID)
		})
		if li == nil || !strings.Contains(li.Text(), wantReady) {
			t.Errorf("replica %s (readyAfterSeconds %g) listed as %v, want %q", timed.ID, *timed.ReadyAfterSeconds, li, wantReady)
		}
		// The warm replica is visibly different: hatched segment, "warm idle".
		idle := doc.All(func(n *node) bool { return n.HasClass("seg") && n.HasClass("idle") })
		if len(idle) == 0 || idle[0].Attr["data-function"] != "ocr" {
			t.Errorf("no hatched warm segment for ocr: %v", idle)
		}
		// The function missing its SLO is marked in words as well as in
		// colour, in its row and in the totals; the one meeting it is not.
		fns := doc.First(byID("functions"))
		for name, want := range map[string][]string{
			"detector": {"✗ misses SLO", "p95 above 50 ms", "100 % over 50 ms or failed (10 of 10)", "10 requests in"},
			"resnet50": {"✓ meets SLO", "60 requests in"},
			"sdxl":     {"no requests in the last minute"},
			"ocr":      {"no SLO to meet", "2 requests in"},
		} {
			row := fns.First(byAttr("tr", "data-function", name))
			if row == nil {
				t.Errorf("no row for %s", name)
				continue
			}
			for _, w := range want {
				if !strings.Contains(row.Text(), w) {
					t.Errorf("%s row %q, want %q", name, row.Text(), w)
				}
			}
		}
		if row := fns.First(byAttr("tr", "data-function", "detector")); row == nil || !row.HasClass("slo-miss") {
			t.Error("detector's row is not marked")
		}
		if tile := doc.First(byAttr("div", "data-total", "slo")); tile == nil || !tile.HasClass("bad") || !strings.Contains(tile.Text(), "1 of 2 miss: detector") {
			t.Errorf("SLO totals tile %v, want 1 of 2 miss: detector, marked", tile)
		}
		shot := filepath.Join(dir, "gpu-map.png")
		b.screenshot(pageURL(p.srv, true), "1280,900", shot)
		// The whole page, functions table included, for the README.
		full := filepath.Join(dir, "gpu-map-full.png")
		b.screenshot(pageURL(p.srv, true), "1280,1440", full)
		t.Logf("screenshots: %s, %s", shot, full)
		if *updateDocs && !t.Failed() {
			_, file, _, _ := runtime.Caller(0)
			png, _ := os.ReadFile(full)
			docs := filepath.Join(filepath.Dir(file), "..", "..", "docs", "gpu-map.png")
			if err := os.WriteFile(docs, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("updated %s", docs)
		}
	})
}

// TestGPUMapManyGPUs: a bigger cluster (4 nodes of 8 GPUs) renders every
// GPU, the cards wrap, and the numbers still match.
func TestGPUMapManyGPUs(t *testing.T) {
	b := browser{t: t, path: chromiumPath(t)}
	var inv gpu.Inventory
	for n := range 4 {
		node := gpu.Node{Name: fmt.Sprintf("gpu-node-%d", n)}
		for i := range 8 {
			node.GPUs = append(node.GPUs, gpu.Device{
				UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-%012d", n, i), Node: node.Name, Index: i,
				Product: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 << 30, SMCount: 108,
			})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	inv.Source = "inventory.yaml"
	p := startProvider(t, inv)
	for i, sm := range []int{10, 25, 50, 100} {
		name := fmt.Sprintf("model-%d", i)
		p.deploy(name, map[string]string{"com.openfaas.gpu.sm": strconv.Itoa(sm), "com.openfaas.gpu.memory": strconv.Itoa(sm/5+1) + "Gi"})
		p.scale(name, 5)
	}
	rep := p.settle()
	html, doc := b.dom(pageURL(p.srv, true))
	checkMap(t, doc, rep)
	if n := len(doc.All(byClass("article", "gpu"))); n != 32 {
		t.Errorf("%d GPU cards, want 32", n)
	}
	dir := artifacts(t)
	save(t, dir, "many.html", []byte(html))
	b.screenshot(pageURL(p.srv, true), "1280,900", filepath.Join(dir, "many.png"))
}

// staticReporter serves a fixed report.
type staticReporter scheduler.ClusterReport

func (s staticReporter) GPUReport(context.Context) (scheduler.ClusterReport, error) {
	return scheduler.ClusterReport(s), nil
}

// TestGPUMapStartupTimes: each replica line says how long its replicas
// took to become ready (readyAfterSeconds), in words a reader takes in at
// a glance: one time, the range of alike replicas, "starting…" while not
// ready, the start-up of a warm idle replica beside its state, nothing
// without one.
func TestGPUMapStartupTimes(t *testing.T) {
	b := browser{t: t, path: chromiumPath(t)}
	secs := func(s float64) *float64 { return &s }
	const gi = int64(1) << 30
	rep := scheduler.ClusterReport{
		Source: "inventory.yaml", Emulated: true, Pending: []scheduler.PendingEntry{},
		Nodes: []scheduler.NodeReport{{Name: "node-a", GPUs: []scheduler.GPUReport{
			{UUID: "GPU-00000000-0000-0000-0000-0000000000a0", Index: 0, Product: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 * gi, SMCount: 108,
				SMAllocated: 100, MemoryAllocated: 36 * gi, Replicas: []scheduler.ReplicaReport{
					{ID: "bert-qa-1", Function: "bert-qa", Namespace: "openfaas-fn", SMPercent: 30, MemoryBytes: 6 * gi, Ready: true, Models: []string{"bert-base"}, ReadyAfterSeconds: secs(1.24)},
					{ID: "bert-qa-2", Function: "bert-qa", Namespace: "openfaas-fn", SMPercent: 30, MemoryBytes: 6 * gi, Ready: true, Models: []string{"bert-base"}, ReadyAfterSeconds: secs(2.31)},
					{ID: "bert-qa-3", Function: "bert-qa", Namespace: "openfaas-fn", SMPercent: 30, MemoryBytes: 6 * gi, Idle: true, Standby: true, Models: []string{"bert-base"}, ReadyAfterSeconds: secs(2.0)},
					{ID: "llama-1", Function: "llama", Namespace: "openfaas-fn", SMPercent: 40, MemoryBytes: 16 * gi, Models: []string{}},
					{ID: "ocr-1", Function: "ocr", Namespace: "openfaas-fn", SMPercent: 20, MemoryBytes: 2 * gi, Idle: true, Models: []string{"trocr"}, ReadyAfterSeconds: secs(72.4)},
				}},
			{UUID: "GPU-00000000-0000-0000-0000-0000000000a1", Index: 1, Product: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 * gi, SMCount: 108,
				SMAllocated: 100, MemoryAllocated: 16 * gi, Replicas: []scheduler.ReplicaReport{
					{ID: "whisper-1", Function: "whisper", Namespace: "openfaas-fn", SMPercent: 100, MemoryBytes: 12 * gi, Ready: true, Models: []string{"whisper-large"}, ReadyAfterSeconds: secs(0.34)},
					{ID: "yolo-1", Function: "yolo", Namespace: "openfaas-fn", SMPercent: 30, MemoryBytes: 4 * gi, Idle: true, Models: []string{"yolov8"}},
				}},
		}}},
		Functions: []scheduler.FunctionReport{
			{Name: "bert-qa", Namespace: "openfaas-fn", Model: "bert-base", SMPercent: 30, MemoryBytes: 6 * gi, Batch: 1, Decision: "30 % SM from the annotation", Replicas: 2, Ready: 2, Idle: 1},
			{Name: "llama", Namespace: "openfaas-fn", Model: "llama", SMPercent: 40, MemoryBytes: 16 * gi, Batch: 1, Decision: "40 % SM from the annotation", Replicas: 1},
			{Name: "ocr", Namespace: "openfaas-fn", Model: "trocr", SMPercent: 20, MemoryBytes: 2 * gi, Batch: 1, Decision: "20 % SM from the annotation", Idle: 1},
			{Name: "whisper", Namespace: "openfaas-fn", Model: "whisper-large", SMPercent: 100, MemoryBytes: 12 * gi, Batch: 1, Decision: "a whole GPU", Replicas: 1, Ready: 1},
			{Name: "yolo", Namespace: "openfaas-fn", Model: "yolov8", SMPercent: 30, MemoryBytes: 4 * gi, Batch: 1, Decision: "30 % SM from the annotation", Idle: 1},
		},
	}
	srv := serve(t, staticReporter(rep))
	html, doc := b.dom(pageURL(srv, true))
	dir := artifacts(t)
	save(t, dir, "startup.html", []byte(html))
	checkMap(t, doc, rep)
	// The words themselves, not only the test's copy of the page's format.
	for ids, want := range map[string]struct{ badge, note string }{
		"bert-qa-1 bert-qa-2": {"ready after 1.2–2.3 s", ""},
		"llama-1":             {"starting…", ""},
		"bert-qa-3":           {"standby", "started in 2 s"},
		"ocr-1":               {"warm idle", "started in 1 min 12 s"},
		"whisper-1":           {"ready after 340 ms", ""},
		"yolo-1":              {"warm idle", ""},
	} {
		li := doc.First(byAttr("li", "data-replicas", ids))
		if li == nil {
			t.Errorf("no line for %s", ids)
			continue
		}
		badge, note := li.First(byClass("span", "state")), li.First(byClass("span", "startup"))
		if badge == nil || badge.Text() != want.badge || (note == nil) != (want.note == "") || (note != nil && note.Text() != want.note) {
			t.Errorf("line of %s: %q, want state %q and start-up note %q", ids, li.Text(), want.badge, want.note)
		}
	}
	for _, c := range []struct {
		secs float64
		want string
	}{{0, "< 1 ms"}, {0.0004, "< 1 ms"}, {0.0016, "2 ms"}, {0.34, "340 ms"}, {0.9996, "1 s"}, {2.0, "2 s"}, {2.34, "2.3 s"}, {59.9, "59.9 s"}, {59.97, "1 min"}, {72.4, "1 min 12 s"}, {600, "10 min"}} {
		if got := startupText(c.secs); got != c.want {
			t.Errorf("startupText(%g) = %q, want %q", c.secs, got, c.want)
		}
	}
	b.screenshot(pageURL(srv, true), "1280,700", filepath.Join(dir, "startup.png"))
}

// failingReporter is a backend whose report fails.
type failingReporter struct{}

func (failingReporter) GPUReport(context.Context) (scheduler.ClusterReport, error) {
	return scheduler.ClusterReport{}, errors.New("inventory unavailable: agent on node-a not reporting")
}

// TestGPUMapShowsErrors: the page says what went wrong, with the HTTP
// status and the provider's message, instead of an empty map.
func TestGPUMapShowsErrors(t *testing.T) {
	b := browser{t: t, path: chromiumPath(t)}
	cases := []struct {
		name string
		srv  func(t *testing.T) *httptest.Server
		auth bool
		want []string
	}{
		{"server error", func(t *testing.T) *httptest.Server { return serve(t, failingReporter{}) }, true,
			[]string{"GET /system/gpus failed: HTTP 500", "inventory unavailable: agent on node-a not reporting"}},
		// A provider without the route (an older faas-gpu, a gateway).
		{"no such route", func(t *testing.T) *httptest.Server {
			r := mux.NewRouter()
			r.PathPrefix("/ui").Handler(handlers.MakeUIHandler())
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)
			return srv
		}, false, []string{"GET /system/gpus failed: HTTP 404", "404 page not found"}},
		// The connection drops: no HTTP answer at all.
		{"connection dropped", func(t *testing.T) *httptest.Server {
			r := mux.NewRouter()
			r.PathPrefix("/ui").Handler(handlers.MakeUIHandler())
			r.HandleFunc("/system/gpus", func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
			})
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)
			return srv
		}, false, []string{"GET /system/gpus: cannot reach the provider"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b.t = t
			srv := c.srv(t)
			_, doc := b.dom(pageURL(srv, c.auth))
			if s := doc.First(byTag("body")).Attr["data-state"]; s != "error" {
				t.Errorf("page state %q, want error", s)
			}
			e := doc.First(byID("error"))
			if e == nil {
				t.Fatal("no error region")
			}
			if _, hidden := e.Attr["hidden"]; hidden || e.Attr["role"] != "alert" {
				t.Errorf("error region hidden or not an alert: %v", e.Attr)
			}
			for _, w := range c.want {
				if !strings.Contains(e.Text(), w) {
					t.Errorf("error says %q, want %q", e.Text(), w)
				}
			}
			if !slices.ContainsFunc(doc.All(byClass("p", "empty")), func(n *node) bool { return strings.Contains(n.Text(), "No data") }) {
				t.Error("sections do not say there is no data")
			}
			if c.name == "server error" {
				b.screenshot(pageURL(srv, c.auth), "1280,900", filepath.Join(artifacts(t), "error.png"))
			}
		})
	}
}
