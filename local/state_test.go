package local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// observedBackend is newBackend with its log kept for the test to read.
func observedBackend(t *testing.T, dir string) (*Backend, *observer.ObservedLogs, error) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	b, err := New(Config{StateDir: dir, Inventory: gpu.BuiltinInventory("node-a"), Emulation: Emulation{Latency: time.Millisecond}, Log: zap.New(core)})
	if err == nil {
		t.Cleanup(func() { _ = b.Close(context.Background()) })
	}
	return b, logs, err
}

func names(t *testing.T, b *Backend, ns string) []string {
	t.Helper()
	fns, err := b.List(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fns {
		out = append(out, f.Name)
	}
	sort.Strings(out)
	return out
}

// TestCorruptRecordIsQuarantined: one unreadable record in the state dir
// is moved aside, logged and counted, and everything else is served.
func TestCorruptRecordIsQuarantined(t *testing.T) {
	tests := []struct {
		name string
		file string // relative to the state dir
		data string
		// what is left to serve
		wantDefault, wantTeam []string
	}{
		{name: "invalid JSON", file: "functions/openfaas-fn/f17.json", data: `{"function": {`,
			wantDefault: []string{"good"}, wantTeam: []string{"t1"}},
		{name: "record of another function", file: "functions/openfaas-fn/f17.json",
			data:        `{"function":{"deployment":{"service":"other","namespace":"openfaas-fn","image":"img"}},"replicas":1}`,
			wantDefault: []string{"good"}, wantTeam: []string{"t1"}},
		{name: "namespaces", file: "namespaces.json", data: `{"team": `,
			wantDefault: []string{"good"}, wantTeam: []string{"t1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			b := newBackend(t, dir)
			if err := b.CreateNamespace(ctx, types.FunctionNamespace{Name: "team"}); err != nil {
				t.Fatal(err)
			}
			team := fnSpec("t1", 20, 1<<30)
			team.Deployment.Namespace = "team"
			for _, spec := range []scheduler.Function{fnSpec("good", 20, 1<<30), team} {
				if err := b.Deploy(ctx, spec); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tc.file)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}

			b, logs, err := observedBackend(t, dir)
			if err != nil {
				t.Fatalf("a corrupt %s stops the provider: %v", tc.file, err)
			}
			if got := names(t, b, DefaultNamespace); !reflect.DeepEqual(got, tc.wantDefault) {
				t.Errorf("%s serves %v, want %v", DefaultNamespace, got, tc.wantDefault)
			}
			if got := names(t, b, "team"); !reflect.DeepEqual(got, tc.wantTeam) {
				t.Errorf("team serves %v, want %v", got, tc.wantTeam)
			}
			if n := b.QuarantinedRecords(); n != 1 {
				t.Errorf("%d records quarantined, want 1", n)
			}
			// Gone, or for namespaces.json written anew from what is on disk.
			if data, err := os.ReadFile(path); !errors.Is(err, fs.ErrNotExist) && string(data) == tc.data {
				t.Errorf("%s is still in place (read: %v)", tc.file, err)
			}
			moved, _ := filepath.Glob(filepath.Join(dir, "quarantine", tc.file+".*"))
			if len(moved) != 1 {
				t.Fatalf("quarantine holds %v, want one copy of %s", moved, tc.file)
			}
			if data, err := os.ReadFile(moved[0]); err != nil || string(data) != tc.data {
				t.Errorf("quarantined copy %q (%v), want the file as it was", data, err)
			}
			entries := logs.FilterMessageSnippet("quarantine").FilterLevelExact(zapcore.ErrorLevel).All()
			if len(entries) != 1 || entries[0].ContextMap()["record"] != path {
				t.Errorf("error log naming %s: %v", path, entries)
			}
			// The name is free again, and the provider restarts cleanly.
			if tc.file != "namespaces.json" {
				if err := b.Deploy(ctx, fnSpec("f17", 20, 1<<30)); err != nil {
					t.Errorf("deploy of the quarantined name: %v", err)
				}
			}
		})
	}
}

// TestRecordWrites: a deploy writes its record once, a scale once, and a
// restart writes none that did not change.
func TestRecordWrites(t *testing.T) {
	const n = 5
	dir := t.TempDir()
	ctx := context.Background()
	b := newBackend(t, dir)
	writes := func(b *Backend) uint64 { return b.state.writes.Load() }

	// One placed, one pending: both are one write.
	for i := range n {
		if err := b.Deploy(ctx, fnSpec(string(rune('a'+i)), 40, 2<<30)); err != nil {
			t.Fatal(err)
		}
	}
	if got := writes(b); got != n {
		t.Errorf("%d deploys wrote %d records, want %d", n, got, n)
	}
	before := writes(b)
	if err := b.Scale(ctx, DefaultNamespace, "a", 2); err != nil {
		t.Fatal(err)
	}
	if got := writes(b) - before; got != 1 {
		t.Errorf("a scale wrote %d records, want 1", got)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	b = newBackend(t, dir)
	defer b.Close(ctx)
	if got := writes(b); got != 0 {
		t.Errorf("a restart with nothing changed wrote %d records, want 0", got)
	}
	if got := names(t, b, DefaultNamespace); len(got) != n {
		t.Errorf("restored %v", got)
	}
}
