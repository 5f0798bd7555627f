package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

const (
	// maxStderrReply bounds the stderr text returned with a 500, so that a
	// chatty failing function cannot make the provider hold megabytes.
	maxStderrReply = 64 << 10
	// killWait is how long a killed request process may keep its pipes open
	// (through children that escaped its process group) before the request
	// gives up on them.
	killWait = 2 * time.Second
)

// classicRunner is the classic OpenFaaS watchdog: every request forks the
// function's process once, CGI style.
type classicRunner struct {
	spec ReplicaSpec
	sink LogSink
	log  *zap.Logger
	srv  loopbackServer
	path string
	args []string
	// stream is of-watchdog's streaming mode: stdout goes out as it comes,
	// so a failure after the first byte cannot change the status.
	stream bool
	// contentType is the watchdog's content_type: the answer's type, in
	// place of the request's.
	contentType string
	// requests counts the handlers still running, so that Stop returns
	// only once every request's process group has been killed; stopping,
	// under mu, keeps a handler that starts late from adding to it while
	// Stop waits.
	mu       sync.Mutex
	stopping bool
	requests sync.WaitGroup
}

func newClassicRunner(spec ReplicaSpec, sink LogSink, log *zap.Logger) runner {
	return &classicRunner{spec: spec, sink: sink, log: log}
}

func (r *classicRunner) Start() error {
	path, args, err := resolveProcess(r.spec)
	if err != nil {
		return fmt.Errorf("start %s: %w", r.spec.ID, err)
	}
	r.path, r.args = path, args
	if err := r.srv.start(r.spec.ID, http.HandlerFunc(r.serve), r.log); err != nil {
		return err
	}
	r.log.Info("replica started",
		zap.String("replica", r.spec.ID),
		zap.String("function", r.spec.Function),
		zap.String("mode", "classic"),
		zap.String("process", r.spec.Process),
		zap.String("url", r.srv.URL()))
	return nil
}

func (r *classicRunner) URL() string { return r.srv.URL() }
func (r *classicRunner) Ready() bool { return r.srv.Ready() }

func (r *classicRunner) Stop(ctx context.Context) error {
	if r.srv.stop(ctx) {
		r.log.Warn("replica stopped with requests in flight", zap.String("replica", r.spec.ID))
	}
	// Their contexts are cancelled now; each kills its group, bounded by
	// killWait.
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.requests.Wait()
	return nil
}

func (r *classicRunner) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		http.Error(w, "replica stopping", http.StatusServiceUnavailable)
		return
	}
	r.requests.Add(1)
	r.mu.Unlock()
	defer r.requests.Done()
	ctx := req.Context()
	cmd := exec.CommandContext(ctx, r.path, r.args...)
	cmd.Dir = r.spec.WorkDir
	cmd.Env = childEnv(r.spec.Env, cgiEnv(req)...)
	cmd.SysProcAttr = childSysProcAttr()
	// Kill the whole group: a shell script's children would otherwise keep
	// running, and keep the pipes (and this request) open.
	cmd.Cancel = func() error { return signalGroup(cmd.Process, syscall.SIGKILL) }
	cmd.WaitDelay = killWait
	cmd.Stdin = req.Body

	var stdout bytes.Buffer
	stderr := &lineWriter{emit: func(line string) { r.sink(r.spec.ID, line) }, keep: maxStderrReply}
	cmd.Stdout = &stdout
	cmd.Stderr = stderr
	ct := r.contentType
	if ct == "" {
		ct = req.Header.Get("Content-Type")
	}
	if ct == "" {
		ct = "text/plain"
	}
	if r.stream {
		w.Header().Set("Content-Type", ct)
		cmd.Stdout = &streamWriter{w: w}
	}

	err := cmd.Run()
	// The request is over: whatever it left running in its group (a
	// background job of a shell script) would outlive the replica, and
	// the provider, which nothing else stops.
	_ = signalGroup(cmd.Process, syscall.SIGKILL)
	stderr.Flush()
	if ctx.Err() != nil {
		return // the caller is gone, or the replica is stopping
	}
	if sw, ok := cmd.Stdout.(*streamWriter); ok && sw.wrote {
		if err != nil {
			r.log.Debug("function process failed after streaming its answer", zap.String("replica", r.spec.ID), zap.Error(err))
		}
		return
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.Kept())
		if msg == "" {
			msg = err.Error()
		}
		r.log.Debug("function process failed", zap.String("replica", r.spec.ID), zap.Error(err))
		http.Error(w, msg, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(stdout.Bytes())
}

// streamWriter sends a streaming function's stdout to the caller as it
// comes.
type streamWriter struct {
	w     http.ResponseWriter
	wrote bool
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.wrote = true
	n, err := s.w.Write(p)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
	return n, err
}

// cgiEnv is the request as the classic watchdog exposes it to the process.
func cgiEnv(req *http.Request) []string {
	env := make([]string, 0, len(req.Header)+5)
	for k, v := range req.Header {
		if len(v) > 0 {
			env = append(env, "Http_"+strings.ReplaceAll(k, "-", "_")+"="+v[0])
		}
	}
	return append(env,
		"Http_Method="+req.Method,
		"Http_Path="+req.URL.Path,
		"Http_Query="+req.URL.RawQuery,
		"Http_ContentLength="+strconv.FormatInt(req.ContentLength, 10),
		"Http_Content_Length="+strconv.FormatInt(req.ContentLength, 10),
	)
}

// childEnv is the replica's env plus extra. A process started with an
// explicit env and no PATH cannot find the programs it calls (a container
// always has one), so the provider's PATH is added when the spec has none;
// nothing else of the provider's env leaks into functions.
func childEnv(spec []string, extra ...string) []string {
	env := make([]string, 0, len(spec)+len(extra)+1)
	if envValue(spec, "PATH") == "" {
		if p, ok := os.LookupEnv("PATH"); ok {
			env = append(env, "PATH="+p)
		}
	}
	env = append(env, spec...)
	return append(env, extra...)
}

// resolveProcess splits fprocess into argv as the watchdog does (no shell)
// and finds the executable now, so that a typo fails Start rather than every
// request. A relative path with a slash is relative to the replica's WorkDir,
// where the process runs.
func resolveProcess(spec ReplicaSpec) (string, []string, error) {
	argv := strings.Fields(spec.Process)
	if len(argv) == 0 {
		return "", nil, errors.New("no process to run")
	}
	name := argv[0]
	if strings.ContainsRune(name, filepath.Separator) && !filepath.IsAbs(name) {
		abs, err := filepath.Abs(filepath.Join(spec.WorkDir, name))
		if err != nil {
			return "", nil, fmt.Errorf("find %q: %w", name, err)
		}
		name = abs
	}
	path, err := lookPath(name, envValue(spec.Env, "PATH"))
	if err != nil {
		if pkg, ok := programPackages[filepath.Base(name)]; ok {
			return "", nil, fmt.Errorf("find %q: %w (Debian/Ubuntu: apt-get install %s)", argv[0], err, pkg)
		}
		return "", nil, fmt.Errorf("find %q: %w", argv[0], err)
	}
	return path, argv[1:], nil
}

// programPackages name the Debian packages of the programs templates run.
var programPackages = map[string]string{"python": "python3 python3-venv", "python3": "python3", "node": "nodejs", "npm": "npm"}

// lookPath finds name on the replica's PATH (pathEnv), which is what the
// process will search (a virtual environment's bin first), or the
// provider's when the replica has none.
func lookPath(name, pathEnv string) (string, error) {
	if pathEnv == "" || strings.ContainsRune(name, filepath.Separator) {
		return exec.LookPath(name)
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not on PATH", exec.ErrNotFound, name)
}

// lineWriter turns a process's output stream into log lines, and keeps the
// first bytes of it when asked (keep > 0). Lines longer than maxLogLine are
// split, so that a process without newlines cannot grow the buffer forever.
type lineWriter struct {
	emit func(string)
	keep int
	buf  []byte
	kept bytes.Buffer
}

const maxLogLine = 16 << 10

func (w *lineWriter) Write(p []byte) (int, error) {
	if room := w.keep - w.kept.Len(); room > 0 {
		w.kept.Write(p[:min(room, len(p))])
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			break
		}
		w.buf = append(w.buf, p[:i]...)
		w.line()
		p = p[i+1:]
	}
	for len(w.buf) >= maxLogLine {
		w.emit(string(w.buf[:maxLogLine]))
		w.buf = append(w.buf[:0], w.buf[maxLogLine:]...)
	}
	return n, nil
}

func (w *lineWriter) line() {
	w.emit(string(bytes.TrimSuffix(w.buf, []byte{'\r'})))
	w.buf = w.buf[:0]
}

// Flush emits a last line that had no newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.line()
	}
}

// Kept is the start of the stream, up to keep bytes.
func (w *lineWriter) Kept() string { return w.kept.String() }
