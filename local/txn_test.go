package local

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// failWrites makes every write and removal of the record of function name
// fail, until the returned func is called.
func failWrites(b *Backend, name string) (restore func()) {
	target := b.state.functionPath(DefaultNamespace, name)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state.writeFile = func(path string, data []byte, perm os.FileMode) error {
		if path == target {
			return errors.New("injected: disk full")
		}
		return writeFileAtomic(path, data, perm)
	}
	b.state.removeFile = func(path string) error {
		if path == target {
			return errors.New("injected: disk full")
		}
		return os.Remove(path)
	}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.state.writeFile, b.state.removeFile = writeFileAtomic, os.Remove
	}
}

// backendView is what a client and the GPUs see of a backend.
type backendView struct {
	Functions  []types.FunctionStatus
	Placements map[string]scheduler.Placement
	Idle       map[string]int
	OnDisk     string
}

func viewOf(t *testing.T, b *Backend, name string) backendView {
	t.Helper()
	fns, err := b.List(context.Background(), DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fns {
		fns[i].AvailableReplicas = 0 // start-up timing, not state
	}
	v := backendView{Functions: fns, Placements: b.core.Allocator().Placements(), Idle: map[string]int{}}
	b.mu.Lock()
	for _, fn := range b.core.Functions() {
		v.Idle[fn.Key] = len(fn.Warm)
	}
	b.mu.Unlock()
	data, _ := os.ReadFile(b.state.functionPath(DefaultNamespace, name))
	v.OnDisk = string(data)
	return v
}

// TestFailedRecordWriteChangesNothing: a deploy, update, scale or delete
// whose record cannot be written (or removed) fails and leaves the backend
// as it was; a retry once the disk is back succeeds.
func TestFailedRecordWriteChangesNothing(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(ctx context.Context, b *Backend) error // before the write fails
		op      func(ctx context.Context, b *Backend) error
		check   func(t *testing.T, b *Backend) // after the retry
	}{
		{
			name: "deploy",
			op:   func(ctx context.Context, b *Backend) error { return b.Deploy(ctx, fnSpec("f", 30, 2<<30)) },
			check: func(t *testing.T, b *Backend) {
				if got := names(t, b, DefaultNamespace); !reflect.DeepEqual(got, []string{"f", "other"}) {
					t.Errorf("functions %v after the retry", got)
				}
			},
		},
		{
			name:    "scale up",
			prepare: func(ctx context.Context, b *Backend) error { return b.Deploy(ctx, fnSpec("f", 30, 2<<30)) },
			op:      func(ctx context.Context, b *Backend) error { return b.Scale(ctx, DefaultNamespace, "f", 3) },
			check: func(t *testing.T, b *Backend) {
				if st, _ := b.Status(context.Background(), DefaultNamespace, "f"); st.Replicas != 3 {
					t.Errorf("%d replicas after the retry, want 3", st.Replicas)
				}
			},
		},
		{
			name: "scale down",
			prepare: func(ctx context.Context, b *Backend) error {
				if err := b.Deploy(ctx, fnSpec("f", 30, 2<<30)); err != nil {
					return err
				}
				return b.Scale(ctx, DefaultNamespace, "f", 3)
			},
			op: func(ctx context.Context, b *Backend) error { return b.Scale(ctx, DefaultNamespace, "f", 1) },
			check: func(t *testing.T, b *Backend) {
				b.mu.Lock()
				defer b.mu.Unlock()
				if fn, _ := b.core.Function(key(DefaultNamespace, "f")); len(fn.Live) != 1 || len(fn.Warm) != 2 {
					t.Errorf("%d in service and %d warm after the retry, want 1 and 2", len(fn.Live), len(fn.Warm))
				}
			},
		},
		{
			name: "scale up from warm",
			prepare: func(ctx context.Context, b *Backend) error {
				if err := b.Deploy(ctx, fnSpec("f", 30, 2<<30)); err != nil {
					return err
				}
				if err := b.Scale(ctx, DefaultNamespace, "f", 3); err != nil {
					return err
				}
				return b.Scale(ctx, DefaultNamespace, "f", 1)
			},
			op: func(ctx context.Context, b *Backend) error { return b.Scale(ctx, DefaultNamespace, "f", 3) },
			check: func(t *testing.T, b *Backend) {
				b.mu.Lock()
				defer b.mu.Unlock()
				if fn, _ := b.core.Function(key(DefaultNamespace, "f")); len(fn.Live) != 3 || len(fn.Warm) != 0 {
					t.Errorf("%d in service and %d warm after the retry, want 3 and 0", len(fn.Live), len(fn.Warm))
				}
			},
		},
		{
			name:    "update",
			prepare: func(ctx context.Context, b *Backend) error { return b.Deploy(ctx, fnSpec("f", 30, 2<<30)) },
			op:      func(ctx context.Context, b *Backend) error { return b.Update(ctx, fnSpec("f", 50, 4<<30)) },
			check: func(t *testing.T, b *Backend) {
				for id, p := range b.core.Allocator().Placements() {
					if strings.HasPrefix(id, "f-") && p.Slice.SMPercent != 50 {
						t.Errorf("replica %s has %d%% SM after the retry, want 50", id, p.Slice.SMPercent)
					}
				}
			},
		},
		{
			name:    "delete",
			prepare: func(ctx context.Context, b *Backend) error { return b.Deploy(ctx, fnSpec("f", 30, 2<<30)) },
			op:      func(ctx context.Context, b *Backend) error { return b.Delete(ctx, DefaultNamespace, "f") },
			check: func(t *testing.T, b *Backend) {
				if got := names(t, b, DefaultNamespace); !reflect.DeepEqual(got, []string{"other"}) {
					t.Errorf("functions %v after the retry", got)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := newBackend(t, t.TempDir())
			defer b.Close(ctx)
			if err := b.Deploy(ctx, fnSpec("other", 20, 1<<30)); err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				if err := tc.prepare(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			before := viewOf(t, b, "f")
			restore := failWrites(b, "f")
			err := tc.op(ctx, b)
			if err == nil || !strings.Contains(err.Error(), "injected: disk full") {
				t.Fatalf("error %v, want the write's", err)
			}
			after := viewOf(t, b, "f")
			if !reflect.DeepEqual(after.Functions, before.Functions) {
				t.Errorf("a failed %s changed the functions:\nbefore %+v\nafter  %+v", tc.name, before.Functions, after.Functions)
			}
			if !reflect.DeepEqual(after.Placements, before.Placements) || !reflect.DeepEqual(after.Idle, before.Idle) {
				t.Errorf("a failed %s changed the bookings:\nbefore %v, warm %v\nafter  %v, warm %v", tc.name, before.Placements, before.Idle, after.Placements, after.Idle)
			}
			if after.OnDisk != before.OnDisk {
				t.Errorf("a failed %s changed the record on disk:\nbefore %s\nafter  %s", tc.name, before.OnDisk, after.OnDisk)
			}
			restore()
			if err := tc.op(ctx, b); err != nil {
				t.Fatalf("retry: %v", err)
			}
			tc.check(t, b)
			if after := viewOf(t, b, "f"); after.OnDisk == before.OnDisk {
				t.Error("the retry wrote no record")
			}
			// Memory and disk agree: a restart brings back what runs now.
			want := viewOf(t, b, "f")
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			b2 := newBackend(t, b.state.dir)
			defer b2.Close(ctx)
			if got := viewOf(t, b2, "f"); !reflect.DeepEqual(got.Functions, want.Functions) || got.OnDisk != want.OnDisk {
				t.Errorf("after a restart:\n%+v\nwant\n%+v", got.Functions, want.Functions)
			}
		})
	}
}
