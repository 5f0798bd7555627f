package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
)

// TemplatesConfig configures how functions built from OpenFaaS templates
// (faas-cli build --shrinkwrap) run in local mode.
type TemplatesConfig struct {
	// BuildRoot holds one folder per function, build/<function> as
	// faas-cli writes it; relative paths are from the provider's folder.
	BuildRoot string
	// StateDir is the backend's state dir: dependencies are installed
	// under its deps/ folder, so they survive restarts.
	StateDir string
	Log      *zap.Logger
}

// Templates runs functions from template build folders: it finds a
// function's folder, installs its dependencies once per content, and
// hands out network namespaces (or, where none can be made, the fixed
// upstream ports) to its replicas. One per backend; safe for concurrent
// use.
type Templates struct {
	root    string
	depsDir string
	log     *zap.Logger
	// newNetNS makes a replica's network namespace; a field so tests can
	// make it fail as it does without privileges.
	newNetNS func() (*netNS, error)

	mu       sync.Mutex
	installs map[string]*install // by deps folder
	ports    map[int]string      // fixed port → replica holding it, without namespaces
	waiting  map[string]string   // replica → why it waits for a fixed port
	freed    chan struct{}       // closed and replaced when a port is let go
}

// NewTemplates returns the template support of one backend.
func NewTemplates(cfg TemplatesConfig) (*Templates, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	root, err := filepath.Abs(cfg.BuildRoot)
	if err != nil {
		return nil, fmt.Errorf("build root %q: %w", cfg.BuildRoot, err)
	}
	return &Templates{
		root: root, depsDir: filepath.Join(cfg.StateDir, "deps"), log: cfg.Log, newNetNS: newNetNS,
		installs: map[string]*install{}, ports: map[int]string{}, waiting: map[string]string{}, freed: make(chan struct{}),
	}, nil
}

// buildFolder is a function's folder in the build root with what its
// Dockerfile says.
type buildFolder struct {
	Dir   string
	Image dockerImage
}

// errNoDockerfile marks a build folder faas-cli did not finish.
var errNoDockerfile = errors.New("has no Dockerfile: it is not a `faas-cli build --shrinkwrap` folder")

// folder finds function name's build folder: ok is false when there is
// none, and the function keeps running as before (envProcess, or an
// emulated worker). A folder that is there but unusable is an error.
func (t *Templates) folder(name string) (buildFolder, bool, error) {
	dir := filepath.Join(t.root, name)
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return buildFolder{}, false, nil
	}
	if err != nil {
		return buildFolder{}, false, fmt.Errorf("build folder %s: %w", dir, err)
	}
	if !st.IsDir() {
		return buildFolder{}, false, fmt.Errorf("build folder %s is not a folder", dir)
	}
	img, err := readDockerfile(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return buildFolder{}, true, fmt.Errorf("build folder %s %w", dir, errNoDockerfile)
	}
	if err != nil {
		return buildFolder{}, true, fmt.Errorf("build folder %s: %w", dir, err)
	}
	return buildFolder{Dir: dir, Image: img}, true, nil
}

// hostPath maps a path inside the image to this machine: the image's
// WORKDIR is the build folder (faas-cli's templates copy the folder's
// content there), relative paths are from it, and other absolute paths are
// left as they are.
func (b buildFolder) hostPath(p string) string {
	if p == "" {
		return b.Dir
	}
	if !filepath.IsAbs(p) {
		return filepath.Join(b.Dir, p)
	}
	wd := filepath.Clean(b.Image.WorkDir)
	if wd != "/" {
		if rel, err := filepath.Rel(wd, filepath.Clean(p)); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(b.Dir, rel)
		}
	}
	return p
}

// deps is what a build folder's dependency steps produced: the env a
// process needs to use them.
type deps struct {
	Env []string
}

// install is one dependency install, shared by every replica that needs
// the same content.
type install struct {
	done chan struct{}
	deps deps
	err  error
}

// depStep is one tool run of a build folder's dependencies.
type depStep struct {
	kind  string   // "pip" or "npm"
	files []string // inputs, relative to the build folder: they key the install
}

// depSteps lists the dependency steps a build folder needs: pip for
// requirements.txt (at the top and in function/), npm for package.json.
func depSteps(dir string) []depStep {
	var steps []depStep
	var pip, npm []string
	for _, sub := range []string{".", "function"} {
		if fileExists(filepath.Join(dir, sub, "requirements.txt")) {
			pip = append(pip, filepath.Join(sub, "requirements.txt"))
		}
		if fileExists(filepath.Join(dir, sub, "package.json")) {
			npm = append(npm, filepath.Join(sub, "package.json"))
			if fileExists(filepath.Join(dir, sub, "package-lock.json")) {
				npm = append(npm, filepath.Join(sub, "package-lock.json"))
			}
		}
	}
	if len(pip) > 0 {
		steps = append(steps, depStep{kind: "pip", files: pip})
	}
	if len(npm) > 0 {
		steps = append(steps, depStep{kind: "npm", files: npm})
	}
	return steps
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// prepare installs the dependencies of function fn's build folder, once
// per content: replicas that start together wait for one install, and a
// restarted provider finds a finished one in the state dir. Progress goes
// to progress, one line at a time.
func (t *Templates) prepare(ctx context.Context, ns, fn string, b buildFolder, progress func(string)) (deps, error) {
	var out deps
	for _, step := range depSteps(b.Dir) {
		d, err := t.step(ctx, ns, fn, b, step, progress)
		if err != nil {
			return deps{}, err
		}
		out.Env = append(out.Env, d.Env...)
	}
	return out, nil
}

func (t *Templates) step(ctx context.Context, ns, fn string, b buildFolder, step depStep, progress func(string)) (deps, error) {
	sum, err := contentKey(b.Dir, step.files)
	if err != nil {
		return deps{}, fmt.Errorf("%s dependencies: %w", step.kind, err)
	}
	dir := filepath.Join(t.depsDir, ns, fn, step.kind+"-"+sum)
	t.mu.Lock()
	in, ok := t.installs[dir]
	if !ok || isDone(in.done) && in.err != nil {
		// A failed install is tried again by the next replica: the user
		// may have installed the missing tool meanwhile.
		in = &install{done: make(chan struct{})}
		t.installs[dir] = in
		go func() {
			// Not the caller's context: other replicas wait on this install,
			// and one that stops must not abort it for them.
			in.deps, in.err = t.run(dir, b, step, progress)
			close(in.done)
		}()
	}
	t.mu.Unlock()
	select {
	case <-in.done:
		return in.deps, in.err
	case <-ctx.Done():
		return deps{}, ctx.Err()
	}
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// completeMark is written last into a deps folder: a folder without it is
// a half-done install (a crash, a kill -9) and is removed, never used.
const completeMark = ".faas-gpu-complete"

func (t *Templates) run(dir string, b buildFolder, step depStep, progress func(string)) (deps, error) {
	env := depEnv(step.kind, dir)
	if fileExists(filepath.Join(dir, completeMark)) {
		progress(fmt.Sprintf("%s dependencies already installed in %s", step.kind, dir))
		return deps{Env: env}, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return deps{}, fmt.Errorf("remove a half-done install %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return deps{}, fmt.Errorf("%s dependencies: %w", step.kind, err)
	}
	var err error
	switch step.kind {
	case "pip":
		err = t.pip(dir, b, step, progress)
	case "npm":
		err = t.npm(dir, b, step, progress)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, completeMark), nil, 0o644)
	}
	if err != nil {
		// Nothing half-installed stays behind to be mistaken for a result.
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			t.log.Error("failed install not removed", zap.String("dir", dir), zap.Error(rmErr))
		}
		return deps{}, err
	}
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), step.kind+"-*"))
	for _, o := range old {
		if o != dir {
			_ = os.RemoveAll(o) // an earlier content's install: nothing uses it any more
		}
	}
	progress(fmt.Sprintf("%s dependencies installed in %s", step.kind, dir))
	return deps{Env: env}, nil
}

// depEnv is how a process finds the installed dependencies.
func depEnv(kind, dir string) []string {
	switch kind {
	case "pip":
		venv := filepath.Join(dir, "venv")
		return []string{"VIRTUAL_ENV=" + venv, "PATH=" + filepath.Join(venv, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")}
	case "npm":
		// One node_modules per package.json, top first: require() looks in
		// NODE_PATH after the folders above the module.
		var paths []string
		for _, sub := range []string{"root", "function"} {
			paths = append(paths, filepath.Join(dir, sub, "node_modules"))
		}
		return []string{"NODE_PATH=" + strings.Join(paths, string(os.PathListSeparator))}
	}
	return nil
}

// missingTool says what to install for a tool that is not on PATH.
type missingTool struct{ tool, debian string }

func (m missingTool) Error() string {
	return fmt.Sprintf("%s is not installed: install it (Debian/Ubuntu: apt-get install %s)", m.tool, m.debian)
}

func (t *Templates) pip(dir string, b buildFolder, step depStep, progress func(string)) error {
	python, err := exec.LookPath("python3")
	if err != nil {
		return fmt.Errorf("pip dependencies of %s: %w", b.Dir, missingTool{"python3", "python3 python3-venv"})
	}
	venv := filepath.Join(dir, "venv")
	progress("creating a virtual environment with the system site packages: " + venv)
	if err := runTool(progress, b.Dir, python, "-m", "venv", "--system-site-packages", venv); err != nil {
		return fmt.Errorf("pip dependencies of %s: python3 -m venv: %w (Debian/Ubuntu: apt-get install python3-venv)", b.Dir, err)
	}
	for _, req := range step.files {
		progress("pip install -r " + req)
		if err := runTool(progress, b.Dir, filepath.Join(venv, "bin", "pip"), "install", "--disable-pip-version-check", "--no-input", "-r", req); err != nil {
			return fmt.Errorf("pip install -r %s in %s: %w", req, b.Dir, err)
		}
	}
	return nil
}

func (t *Templates) npm(dir string, b buildFolder, step depStep, progress func(string)) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("npm dependencies of %s: %w", b.Dir, missingTool{"npm", "nodejs npm"})
	}
	for _, f := range step.files {
		if filepath.Base(f) != "package.json" {
			continue
		}
		sub := "root"
		if filepath.Dir(f) == "function" {
			sub = "function"
		}
		// npm installs beside a copy of package.json (and its lock), so the
		// build folder stays as faas-cli wrote it.
		into := filepath.Join(dir, sub)
		if err := os.MkdirAll(into, 0o755); err != nil {
			return err
		}
		for _, name := range []string{"package.json", "package-lock.json"} {
			src := filepath.Join(b.Dir, filepath.Dir(f), name)
			if !fileExists(src) {
				continue
			}
			if err := copyFile(src, filepath.Join(into, name)); err != nil {
				return fmt.Errorf("npm dependencies of %s: %w", b.Dir, err)
			}
		}
		progress("npm install for " + f)
		if err := runTool(progress, into, npm, "install", "--no-audit", "--no-fund", "--omit=dev"); err != nil {
			return fmt.Errorf("npm install for %s in %s: %w", f, b.Dir, err)
		}
	}
	return nil
}

// runTool runs an install command, its output line by line to progress.
func runTool(progress func(string), dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = childSysProcAttr()
	w := &lineWriter{emit: progress}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	w.Flush()
	if err != nil {
		return fmt.Errorf("%s %s: %w", filepath.Base(name), strings.Join(args, " "), err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// contentKey hashes the named files of dir (name and content), so an
// edited requirements.txt gets a fresh install.
func contentKey(dir string, files []string) (string, error) {
	sorted := append([]string(nil), files...)
	sort.Strings(sorted)
	h := sha256.New()
	for _, f := range sorted {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// imageEnv is the image's ENV as KEY=VALUE, less PATH: the image's PATH
// names folders of the image, and the machine's (with the function's
// virtual environment first) is the one that finds its tools here.
func (b buildFolder) imageEnv() []string {
	var env []string
	for _, k := range b.Image.EnvKeys {
		if k != "PATH" {
			env = append(env, k+"="+b.Image.Env[k])
		}
	}
	return env
}

// process is the image's fprocess, else its CMD when that is the function
// itself rather than a watchdog.
func (b buildFolder) process() string {
	if p := b.Image.Env["fprocess"]; p != "" {
		return p
	}
	if len(b.Image.Cmd) > 0 && !strings.Contains(filepath.Base(b.Image.Cmd[0]), "watchdog") {
		return strings.Join(b.Image.Cmd, " ")
	}
	return ""
}

// checkProcess finds, before any install, what fprocess names in the
// build folder: a program given by path, and the script it runs
// ("python index.py"). Programs found on PATH are looked up at start,
// once the dependencies (a virtual environment's python) are there.
func (b buildFolder) checkProcess(process string) error {
	argv := strings.Fields(process)
	if len(argv) == 0 {
		return fmt.Errorf("build folder %s: no fprocess: set it in stack.yml, or ENV fprocess in the Dockerfile", b.Dir)
	}
	check := func(p string) error {
		if !fileExists(b.hostPath(p)) {
			return fmt.Errorf("build folder %s: fprocess %q: %s not found in the build folder", b.Dir, process, p)
		}
		return nil
	}
	if strings.ContainsRune(argv[0], '/') {
		return check(argv[0])
	}
	for _, a := range argv[1:] {
		if a == "-m" || a == "-c" || a == "-e" {
			return nil // a module or inline code follows, not a file
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		if scriptExts[filepath.Ext(a)] {
			return check(a)
		}
		break
	}
	return nil
}

// scriptExts are the files an interpreter in fprocess runs.
var scriptExts = map[string]bool{".py": true, ".js": true, ".mjs": true, ".cjs": true, ".sh": true, ".rb": true, ".pl": true, ".php": true}

// readyPathAnnotation is OpenFaaS's readiness path annotation.
const readyPathAnnotation = "com.openfaas.ready.http.path"

// watchdogOf finds a function's build folder and watchdog settings: the
// Dockerfile's ENV, overridden by the function's env as in a container.
// Both nil: the function runs as before.
func (b *Backend) watchdogOf(dep types.FunctionDeployment) (*buildFolder, *Watchdog, error) {
	t := b.cfg.Templates
	if t == nil {
		return nil, nil, nil
	}
	bf, ok, err := t.folder(dep.Service)
	if orig := profileCopyOf(dep); err == nil && !ok && orig != "" {
		// A copy `faas-gpu profile` deploys has no build folder of its own:
		// without its original's it would run as an emulated worker, and the
		// profile would measure the emulation instead of the function.
		bf, ok, err = t.folder(orig)
	}
	if err != nil {
		return nil, nil, err
	}
	if !ok && !wantsWatchdog(dep.EnvVars) {
		return nil, nil, nil
	}
	settings := map[string]string{}
	var build *buildFolder
	if ok {
		build = &bf
		for k, v := range bf.Image.Env {
			settings[k] = v
		}
	}
	for k, v := range dep.EnvVars {
		settings[k] = v
	}
	var readyPath string
	if dep.Annotations != nil {
		readyPath = (*dep.Annotations)[readyPathAnnotation]
	}
	wd, err := parseWatchdog(settings, readyPath)
	if err != nil {
		return nil, nil, err
	}
	if build != nil && wd.Mode != "static" {
		process := processOf(dep)
		if process == "" {
			process = build.process()
		}
		if err := build.checkProcess(process); err != nil {
			return nil, nil, err
		}
	}
	wd.Build, wd.Templates = build, t
	return build, &wd, nil
}

// profileCopyLabel is profiles/profiler's LabelCopyOf: the function a
// temporary profiling copy was made from.
const profileCopyLabel = "com.openfaas.gpu.profile-copy-of"

// profileCopyOf is the original of a profiling copy, "" for any other
// function or for a label that is not a plain function name (it becomes a
// path under the build root).
func profileCopyOf(dep types.FunctionDeployment) string {
	if dep.Labels == nil {
		return ""
	}
	orig := (*dep.Labels)[profileCopyLabel]
	if orig == "" || orig == "." || orig == ".." || strings.ContainsAny(orig, `/\`) {
		return ""
	}
	return orig
}

// buildStatus is what a function's status says of how it runs, read from
// its build folder each time so that a folder fixed (or broken) after the
// deploy shows at once: emulated is true only when no replica of it would
// run a program (no process from envProcess, fprocess or the Dockerfile,
// and no watchdog), and problem is why its replicas cannot start, empty
// when they can. A broken folder is a problem, not an emulated worker: the
// function asked for its own code.
func (b *Backend) buildStatus(dep types.FunctionDeployment) (emulated bool, problem string) {
	build, wd, err := b.watchdogOf(dep)
	if err != nil {
		return false, err.Error()
	}
	if wd != nil || processOf(dep) != "" {
		return false, ""
	}
	return build == nil || build.process() == "", ""
}
