package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/faas-gpu/faas-gpu/internal/parking"
)

// errStopped ends the supervisor when Stop raced with a restart.
var errStopped = errors.New("replica stopped")

// processRunner is of-watchdog mode=http: the function is a long-running
// HTTP server on a port the runner picks, supervised and restarted when it
// crashes.
type processRunner struct {
	spec ReplicaSpec
	sink LogSink
	log  *zap.Logger

	// Timings; fields so tests can shorten them.
	backoffMin     time.Duration // first restart delay, doubled per crash
	backoffMax     time.Duration
	stableAfter    time.Duration // a run this long resets the back-off
	readyWarnAfter time.Duration
	pollEvery      time.Duration
	probeTimeout   time.Duration
	stopGrace      time.Duration // SIGTERM to SIGKILL
	readerGrace    time.Duration // how long log pipes may outlive the child

	// fixedPort, when set, is the template's own upstream port, in place
	// of one picked here; startIn and dial then reach the replica's network
	// namespace (nil: the provider's).
	fixedPort int
	startIn   func(func() error) error
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	// prefixLogs is the watchdog's prefix_logs: lines say stdout or stderr.
	prefixLogs bool
	// probePath is what readiness asks for ("/" by default); with
	// probeStrict only a 2xx answer is ready, else any answer but a
	// server error is (a template need not serve a health path: its
	// 404 still proves the server up).
	probePath   string
	probeStrict bool
	// handedProbe is the readiness a parked process has once handed over
	// (probePath and probeStrict as they were before it was parked).
	handedProbe struct {
		path   string
		strict bool
	}
	// unready is the readiness path's last not-ready answer.
	unready atomic.Pointer[string]
	// refused is why a parked process showed that its server does not
	// speak /_/gpu (parking.Answer), or cannot start without its GPU
	// settings (it exited before it waited for them); nil while it may.
	// waited is set once it has waited for them.
	refused atomic.Pointer[string]
	waited  atomic.Bool

	path   string
	args   []string
	port   int
	url    string
	client *http.Client
	ready  atomic.Bool
	starts atomic.Int64 // processes started, for tests and diagnostics

	mu      sync.Mutex // guards the fields below and ready's transitions
	started bool
	stopped bool
	child   *childRun // the running process; nil between runs
	stopCh  chan struct{}
	done    chan struct{} // closed when the supervisor has reaped the last child
}

// childRun is one start of the process.
type childRun struct {
	cmd     *exec.Cmd
	began   time.Time
	ctx     context.Context // done when the process has exited
	exit    context.CancelFunc
	gone    bool // set under processRunner.mu once exited; stops a late "ready"
	pipes   []*os.File
	readers sync.WaitGroup
	poller  sync.WaitGroup
}

func newProcessRunner(spec ReplicaSpec, sink LogSink, log *zap.Logger) runner {
	return &processRunner{
		spec:           spec,
		sink:           sink,
		log:            log,
		backoffMin:     100 * time.Millisecond,
		backoffMax:     10 * time.Second,
		stableAfter:    30 * time.Second,
		readyWarnAfter: 30 * time.Second,
		pollEvery:      50 * time.Millisecond,
		probeTimeout:   time.Second,
		stopGrace:      5 * time.Second,
		readerGrace:    time.Second,
		probePath:      "/",
		stopCh:         make(chan struct{}),
		done:           make(chan struct{}),
	}
}

func (r *processRunner) Start() error {
	path, args, err := resolveProcess(r.spec)
	if err != nil {
		return fmt.Errorf("start %s: %w", r.spec.ID, err)
	}
	port := r.fixedPort
	if port == 0 {
		if port, err = freeLoopbackPort(); err != nil {
			return fmt.Errorf("start %s: %w", r.spec.ID, err)
		}
	}
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return fmt.Errorf("start %s: already started", r.spec.ID)
	}
	r.started = true
	if r.spec.Parked {
		// Waiting for its settings is what a parked process is ready for.
		r.handedProbe.path, r.handedProbe.strict = r.probePath, r.probeStrict
		r.probePath, r.probeStrict = "/_/gpu", true
	}
	r.path, r.args, r.port = path, args, port
	r.url = "http://127.0.0.1:" + strconv.Itoa(port)
	// Keep-alives off: the probe must not hold connections to a child that
	// is about to be replaced.
	r.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: r.dial}}
	r.mu.Unlock()

	// The first start is synchronous so that a process that cannot even be
	// started fails Start, not a log line later.
	run, err := r.spawn()
	if err != nil {
		close(r.done)
		return fmt.Errorf("start %s: %w", r.spec.ID, err)
	}
	go r.supervise(run)
	return nil
}

func (r *processRunner) URL() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.url
}

func (r *processRunner) Ready() bool { return r.ready.Load() }

// pid is the running child's pid, 0 between runs.
func (r *processRunner) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.child == nil {
		return 0
	}
	return r.child.cmd.Process.Pid
}

// Stop ends restarts, asks the process group to terminate, kills it after
// the grace period (or when ctx ends first), and returns once the child is
// reaped and its output read.
func (r *processRunner) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return nil
	}
	if !r.stopped {
		r.stopped = true
		close(r.stopCh)
	}
	child := r.child
	r.mu.Unlock()

	if child != nil {
		if err := signalGroup(child.cmd.Process, syscall.SIGTERM); err != nil {
			r.log.Warn("replica: SIGTERM failed", zap.String("replica", r.spec.ID), zap.Error(err))
		}
	}
	grace := time.NewTimer(r.stopGrace)
	defer grace.Stop()
	select {
	case <-r.done:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	child = r.child
	r.mu.Unlock()
	if child != nil {
		r.log.Warn("replica did not stop in time, killing it",
			zap.String("replica", r.spec.ID), zap.Int("pid", child.cmd.Process.Pid))
		_ = signalGroup(child.cmd.Process, syscall.SIGKILL)
	}
	// Bounded: SIGKILL cannot be ignored and the log readers give up after
	// readerGrace.
	<-r.done
	return nil
}

// spawn starts one run of the process with its log readers and readiness
// probe.
func (r *processRunner) spawn() (*childRun, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	port := strconv.Itoa(r.port)
	cmd := exec.Command(r.path, r.args...)
	cmd.Dir = r.spec.WorkDir
	r.mu.Lock()
	env := r.spec.Env // a parked process's changes at its hand-over
	r.mu.Unlock()
	cmd.Env = childEnv(env, "port="+port, "PORT="+port, "http_port="+port)
	// Files, not writers: the child writes straight into the pipes, so Wait
	// does not depend on the readers, and a crash loses no buffered output.
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = childSysProcAttr()

	ctx, exit := context.WithCancel(context.Background())
	run := &childRun{cmd: cmd, ctx: ctx, exit: exit, pipes: []*os.File{outR, errR}}

	// Under mu so that Stop either sees this child or stops it from starting.
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		exit()
		closeAll(outR, outW, errR, errW)
		return nil, errStopped
	}
	if r.startIn != nil {
		err = r.startIn(cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err == nil {
		run.began = time.Now()
		r.child = run
	}
	r.mu.Unlock()
	closeAll(outW, errW) // the child holds its own copies
	if err != nil {
		exit()
		closeAll(outR, errR)
		return nil, fmt.Errorf("run %s: %w", r.path, err)
	}
	r.starts.Add(1)
	r.log.Info("replica started",
		zap.String("replica", r.spec.ID),
		zap.String("function", r.spec.Function),
		zap.String("mode", "http"),
		zap.Int("pid", cmd.Process.Pid),
		zap.String("url", r.url))

	run.readers.Add(2)
	go r.pump(outR, "stdout", &run.readers)
	go r.pump(errR, "stderr", &run.readers)
	run.poller.Add(1)
	go r.watchReady(run)
	return run, nil
}

func (r *processRunner) pump(f *os.File, stream string, wg *sync.WaitGroup) {
	defer wg.Done()
	prefix := ""
	if r.prefixLogs {
		prefix = stream + ": "
	}
	w := &lineWriter{emit: func(line string) { r.sink(r.spec.ID, prefix+line) }}
	_, _ = io.Copy(w, f)
	w.Flush()
	_ = f.Close()
}

// watchReady polls the child until it answers HTTP, and warns once when
// that takes too long.
func (r *processRunner) watchReady(run *childRun) {
	defer run.poller.Done()
	tick := time.NewTicker(r.pollEvery)
	defer tick.Stop()
	warn := time.NewTimer(r.readyWarnAfter)
	defer warn.Stop()
	for {
		if r.probe(run.ctx) {
			r.mu.Lock()
			if !run.gone {
				r.ready.Store(true)
			}
			r.mu.Unlock()
			return
		}
		select {
		case <-run.ctx.Done():
			return
		case <-warn.C:
			r.log.Warn("replica not ready",
				zap.String("replica", r.spec.ID),
				zap.Int("pid", run.cmd.Process.Pid),
				zap.Duration("after", r.readyWarnAfter),
				zap.String("url", r.url))
		case <-tick.C:
		}
	}
}

// probe is true when the child answers anything at all over HTTP: of-watchdog
// functions need not serve a health path. Since "/" is then often the
// function itself, which may take longer than a probe may wait, a connection
// that was accepted and is still being answered when the probe gives up
// counts as up too (what a TCP probe would say).
func (r *processRunner) probe(run context.Context) bool {
	ctx, cancel := context.WithTimeout(run, r.probeTimeout)
	defer cancel()
	var connected atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	r.mu.Lock()
	path, strict := r.probePath, r.probeStrict // a parked process's change at its hand-over
	parked := r.spec.Parked
	r.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+path, nil)
	if err != nil {
		return false
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return connected.Load() && run.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	ok := path == "/" || resp.StatusCode < 500
	if strict {
		ok = resp.StatusCode >= 200 && resp.StatusCode < 300
	}
	if parked {
		var refused string
		ok, refused = parking.Answer(resp.StatusCode, body)
		if refused != "" {
			r.refused.Store(&refused)
		}
		if ok {
			r.waited.Store(true)
		}
	}
	if ok {
		r.unready.Store(nil)
		return true
	}
	// What the replica says about why it is not ready (a model that does
	// not fit its memory limit, say), for its function's status.
	why := strings.TrimSpace(string(body))
	if len(why) > 300 {
		why = why[:300] + "…"
	}
	if why == "" {
		why = http.StatusText(resp.StatusCode)
	}
	why = fmt.Sprintf("%s answers %d: %s", path, resp.StatusCode, why)
	r.unready.Store(&why)
	return false
}

// parkRefused is why this parked process's server showed it cannot be
// parked; "" while it has not.
func (r *processRunner) parkRefused() string {
	if p := r.refused.Load(); p != nil {
		return *p
	}
	return ""
}

// Unready is what the replica's readiness path said the last time it
// answered not ready; "" when it is ready or never said.
func (r *processRunner) Unready() string {
	if p := r.unready.Load(); p != nil {
		return *p
	}
	return ""
}

// supervise waits for each run to end and restarts the process with
// exponential back-off until Stop.
func (r *processRunner) supervise(run *childRun) {
	defer close(r.done)
	delay := r.backoffMin
	for {
		var state *os.ProcessState
		var ranFor time.Duration
		if run != nil {
			state, ranFor = r.reap(run)
		}
		select {
		case <-r.stopCh:
			r.log.Info("replica stopped", zap.String("replica", r.spec.ID), zap.Stringer("status", state))
			return
		default:
		}
		if ranFor >= r.stableAfter {
			delay = r.backoffMin
		}
		if state != nil {
			r.mu.Lock()
			parked := r.spec.Parked
			r.mu.Unlock()
			if parked && !r.waited.Load() {
				why := fmt.Sprintf("exited (%s) before it waited for its GPU settings", state)
				r.refused.Store(&why)
			}
			r.log.Warn("replica exited, restarting",
				zap.String("replica", r.spec.ID),
				zap.Int("exitCode", state.ExitCode()),
				zap.Stringer("status", state),
				zap.Duration("ranFor", ranFor),
				zap.Duration("restartIn", delay))
			r.sink(r.spec.ID, fmt.Sprintf("process %s, restarting in %s", state, delay))
		}
		if !r.sleep(delay) {
			return
		}
		delay = min(delay*2, r.backoffMax)

		var err error
		run, err = r.spawn()
		if errors.Is(err, errStopped) {
			return
		}
		if err != nil {
			r.log.Error("replica restart failed",
				zap.String("replica", r.spec.ID), zap.Error(err), zap.Duration("retryIn", delay))
		}
	}
}

// reap waits for a run's process, clears what it left behind, and marks the
// replica not ready.
func (r *processRunner) reap(run *childRun) (*os.ProcessState, time.Duration) {
	_ = run.cmd.Wait()
	ranFor := time.Since(run.began)
	r.mu.Lock()
	run.gone = true
	r.ready.Store(false)
	r.child = nil
	r.mu.Unlock()
	run.exit()
	// Leftover children would hold the port the next run needs, and the log
	// pipes open.
	_ = signalGroup(run.cmd.Process, syscall.SIGKILL)
	run.poller.Wait()

	drained := make(chan struct{})
	go func() { run.readers.Wait(); close(drained) }()
	t := time.NewTimer(r.readerGrace)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		// Something outside the group still holds the pipes.
		closeAll(run.pipes...)
		<-drained
	}
	return run.cmd.ProcessState, ranFor
}

// sleep waits d unless Stop comes first; false means stop.
func (r *processRunner) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stopCh:
		return false
	case <-t.C:
		return true
	}
}

// freeLoopbackPort asks the kernel for a free port. Another process may take
// it before the child binds; the restart loop then retries on it, which is
// the price of keeping the same URL across restarts.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
