package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"go.uber.org/zap/zaptest"
)

// Issue 14's bad input: a build folder the provider cannot run from is
// accepted at deploy, as OpenFaaS accepts it, and the function's entry in
// /system/gpus says why its replicas do not start. And a function whose
// process comes only from its Dockerfile runs that process, so its status
// must not call it emulated.
func TestBuildFolderStatus(t *testing.T) {
	cases := []struct {
		name         string
		files        map[string]string // build/<name>/...; nil: no folder
		envProcess   string
		wantEmulated bool
		wantProblem  string // substring; "" wants none
	}{
		{name: "no-folder", wantEmulated: true},
		{name: "no-folder-process", envProcess: "cat"},
		{name: "no-dockerfile", files: map[string]string{"index.py": "print(1)\n"},
			wantProblem: "has no Dockerfile"},
		{name: "fprocess-missing", files: map[string]string{"Dockerfile": "FROM python:3\nENV fprocess=\"python3 index.py\"\n"},
			wantProblem: `fprocess "python3 index.py": index.py not found in the build folder`},
		{name: "fprocess-from-dockerfile", files: map[string]string{"Dockerfile": "FROM python:3\nENV fprocess=\"cat\"\n"}},
		{name: "cmd-from-dockerfile", files: map[string]string{"Dockerfile": "FROM alpine\nCMD [\"cat\"]\n"}},
		{name: "watchdog-cmd-only", files: map[string]string{"Dockerfile": "FROM alpine\nCMD [\"fwatchdog\"]\n"},
			wantProblem: "no fprocess: set it in stack.yml, or ENV fprocess in the Dockerfile"},
	}
	root := t.TempDir()
	for _, c := range cases {
		if c.files == nil {
			continue
		}
		dir := filepath.Join(root, c.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, body := range c.files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := t.TempDir()
	tp, err := NewTemplates(TemplatesConfig{BuildRoot: root, StateDir: state, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{StateDir: state, Inventory: gpu.BuiltinInventory("node-a"), Emulation: Emulation{Latency: time.Millisecond},
		Load: handlers.NewLoadBook(), Log: zaptest.NewLogger(t), Templates: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer b.Close(ctx)
	for _, c := range cases {
		fn := fnSpec(c.name, 10, 1<<30)
		fn.Deployment.EnvProcess = c.envProcess
		if err := b.Deploy(ctx, fn); err != nil {
			t.Fatalf("%s: deploy must be accepted: %v", c.name, err)
		}
	}
	rep, err := b.GPUReport(ctx)
	if err != nil {
		t.Fatal(err)
	}
	problems := map[string]string{}
	for _, f := range rep.Functions {
		problems[f.Name] = f.Problem
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := b.Status(ctx, DefaultNamespace, c.name)
			if err != nil {
				t.Fatal(err)
			}
			emulated := st.Labels != nil && (*st.Labels)[LabelEmulated] == "true"
			if emulated != c.wantEmulated {
				t.Errorf("labelled emulated: %v, want %v", emulated, c.wantEmulated)
			}
			got, ok := problems[c.name]
			switch {
			case !ok:
				t.Errorf("no entry in the GPU report")
			case c.wantProblem == "" && got != "":
				t.Errorf("problem %q, want none", got)
			case c.wantProblem != "" && !strings.Contains(got, c.wantProblem):
				t.Errorf("problem %q, want it to say %q", got, c.wantProblem)
			}
		})
	}
}
