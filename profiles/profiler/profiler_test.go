package profiler

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/openfaas/faas-provider/types"
)

// quick is a run short enough for unit tests.
func quick(fn string, sms ...int) Options {
	return Options{Function: fn, SMs: sms, Duration: 150 * time.Millisecond, Warmup: 20 * time.Millisecond,
		Concurrency: 3, Poll: 10 * time.Millisecond, ReadyTimeout: 5 * time.Second}
}

func deployOriginal(f *fakeProvider, name string) {
	ann := map[string]string{"com.openfaas.gpu.model": "resnet50", "com.openfaas.gpu.memory": "2Gi"}
	f.add(types.FunctionDeployment{Service: name, Image: "img", EnvProcess: "./fn", Annotations: &ann})
}

func TestRunMeasuresEachSliceAndRemovesItsCopies(t *testing.T) {
	f := newFakeProvider(t)
	f.user, f.pass = "admin", "secret"
	f.work = 2 * time.Millisecond
	deployOriginal(f, "fn")
	var out syncBuffer
	o := quick("fn", 100, 10, 50)
	o.Progress, o.ProgressEvery = &out, 50*time.Millisecond
	res, err := Run(context.Background(), f.client(t), o)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if got := f.names(); !slices.Equal(got, []string{"fn"}) {
		t.Fatalf("functions left: %v", got)
	}
	var deployed []string
	for _, d := range f.deployments() {
		deployed = append(deployed, d.Service+" sm="+(*d.Annotations)[annotationSM]+" batch="+d.EnvVars[EnvBatch])
	}
	if want := []string{"fn-profile-10 sm=10 batch=1", "fn-profile-50 sm=50 batch=1", "fn-profile-100 sm=100 batch=1"}; !slices.Equal(deployed, want) {
		t.Fatalf("deployed %v, want %v", deployed, want)
	}
	if res.Model != "resnet50" || res.GPU != fakeProduct || res.Function != "fn" || len(res.Points) != 3 {
		t.Fatalf("result %+v", res)
	}
	for i, m := range res.Points {
		if m.Latency.InFlight != 1 || m.Load.InFlight != 3 || m.Latency.Requests == 0 || m.Load.Requests == 0 {
			t.Errorf("point %d: %+v", i, m)
		}
		if i > 0 {
			prev := res.Points[i-1]
			if m.Latency.P50 >= prev.Latency.P50 || m.Load.Throughput <= prev.Load.Throughput {
				t.Errorf("sm %d: p50 %v, %.0f req/s; sm %d: p50 %v, %.0f req/s: want faster with more SMs",
					prev.SM, prev.Latency.P50, prev.Load.Throughput, m.SM, m.Latency.P50, m.Load.Throughput)
			}
		}
	}
	p, err := res.Profile()
	if err != nil {
		t.Fatal(err)
	}
	data, err := profiles.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := profiles.Parse(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if back.Model != "resnet50" || back.GPU != fakeProduct || len(back.Points) != 3 ||
		!strings.HasPrefix(back.Source, "measured by faas-gpu profile on "+time.Now().UTC().Format(time.DateOnly)) {
		t.Fatalf("profile:\n%s", data)
	}
	for _, pt := range back.Points {
		if pt.Quota != 100 || pt.Batch != 1 {
			t.Errorf("point %+v", pt)
		}
	}
	for _, want := range []string{"profiling fn (model resnet50) at sm [10 50 100]% batch [1]", "sm 10%: deploying fn-profile-10",
		"sm 10%: fn-profile-10 ready after", "sm 10% (1 in flight): ", "sm 10% (3 in flight): ", "removed fn-profile-10"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunRemovesWhatItCreatedOnCancel(t *testing.T) {
	f := newFakeProvider(t)
	deployOriginal(f, "fn")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	f.onInvoke = func(name string) int {
		if calls.Add(1) == 20 {
			cancel() // Ctrl-C while the first slice is measured
		}
		return 0
	}
	o := quick("fn", 10, 25)
	o.Duration = time.Minute // only the cancel ends it
	var out syncBuffer
	o.Progress = &out
	start := time.Now()
	_, err := Run(ctx, f.client(t), o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Run took %v after the cancel", took)
	}
	if got := f.names(); !slices.Equal(got, []string{"fn"}) {
		t.Fatalf("functions left after cancel: %v", got)
	}
	if got := f.deletedNames(); !slices.Equal(got, []string{"fn-profile-10"}) {
		t.Fatalf("deleted %v, want fn-profile-10 alone", got)
	}
	if !strings.Contains(out.String(), "removed fn-profile-10") {
		t.Fatalf("progress:\n%s", out.String())
	}
}

func TestRunRemovesWhatItCreatedOnError(t *testing.T) {
	f := newFakeProvider(t)
	deployOriginal(f, "fn")
	f.onInvoke = func(name string) int {
		if name == "fn-profile-50" {
			return http.StatusInternalServerError
		}
		return 0
	}
	_, err := Run(context.Background(), f.client(t), quick("fn", 10, 50, 100))
	if err == nil || !strings.Contains(err.Error(), "sm 50%: all") || !strings.Contains(err.Error(), "HTTP 500: fake failure") {
		t.Fatalf("Run = %v, want the failing slice named with the answer", err)
	}
	if got := f.names(); !slices.Equal(got, []string{"fn"}) {
		t.Fatalf("functions left after an error: %v", got)
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeProvider, o *Options)
		want  string
	}{
		{"unknown function", func(f *fakeProvider, o *Options) { o.Function = "nope" }, "function nope: not found: deploy it first"},
		{"sm out of range", func(f *fakeProvider, o *Options) { o.SMs = []int{10, 120} }, "sm: 120 is outside 1-100"},
		{"no duration", func(f *fakeProvider, o *Options) { o.Duration = 0 }, "duration: 0s must be positive"},
		{"gateway without /system/gpus", func(f *fakeProvider, o *Options) { f.noGPUs = true }, "pass --gpu PRODUCT"},
		{"wrong credentials", func(f *fakeProvider, o *Options) { f.user, f.pass = "admin", "other" }, "unauthorized (401)"},
		{"profiling a copy", func(f *fakeProvider, o *Options) {
			f.add(copyDeployment(types.FunctionStatus{Name: "fn"}, "fn-profile-10", 10, 1))
			o.Function = "fn-profile-10"
		}, "is a temporary copy of fn"},
		{"a user's function in the way", func(f *fakeProvider, o *Options) {
			f.add(types.FunctionDeployment{Service: "fn-profile-10", Image: "mine"})
		}, "function fn-profile-10 exists and is not a copy made by faas-gpu profile"},
		{"copies on two products", func(f *fakeProvider, o *Options) {
			f.productFor = func(n string) string {
				if n == "fn-profile-50" {
					return "Other GPU"
				}
				return fakeProduct
			}
		}, "fn-profile-50 runs on Other GPU but fn-profile-10 ran on " + fakeProduct},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeProvider(t)
			deployOriginal(f, "fn")
			o := quick("fn", 10, 50)
			o.Duration = 50 * time.Millisecond
			tt.setup(f, &o)
			user, pass := "", ""
			if f.user != "" { // the provider wants auth: send credentials it does not accept
				user, pass = "admin", "secret"
			}
			c, err := NewClient(f.srv.URL, user, pass, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := f.names()
			_, err = Run(context.Background(), c, o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error with %q", err, tt.want)
			}
			if after := f.names(); !sameSet(before, after) {
				t.Fatalf("functions before %v, after %v: the run must leave what it found", before, after)
			}
		})
	}
}

func TestRunReplacesACopyLeftByAnEarlierRun(t *testing.T) {
	f := newFakeProvider(t)
	deployOriginal(f, "fn")
	f.add(copyDeployment(types.FunctionStatus{Name: "fn"}, "fn-profile-10", 10, 1))
	var out syncBuffer
	o := quick("fn", 10)
	o.Progress = &out
	if _, err := Run(context.Background(), f.client(t), o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "removing fn-profile-10, left by an earlier run") {
		t.Fatalf("progress:\n%s", out.String())
	}
	if got := f.names(); !slices.Equal(got, []string{"fn"}) {
		t.Fatalf("functions left: %v", got)
	}
}

func TestRunDeploysEachBatchWithItsEnv(t *testing.T) {
	f := newFakeProvider(t)
	deployOriginal(f, "fn")
	o := quick("fn", 50)
	o.Batches = []int{4, 1}
	o.Concurrency = 2
	o.GPU = "Given GPU"
	f.noGPUs = true // --gpu needs no /system/gpus
	res, err := Run(context.Background(), f.client(t), o)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range f.deployments() {
		got = append(got, d.Service+" "+d.EnvVars[EnvBatch])
	}
	if want := []string{"fn-profile-50 1", "fn-profile-50-b4 4"}; !slices.Equal(got, want) {
		t.Fatalf("deployed %v, want %v", got, want)
	}
	// Batch 4 keeps 4 in flight in its only phase: concurrency 2 is below it.
	if b4 := res.Points[1]; b4.Batch != 4 || b4.Latency.InFlight != 4 || b4.Load != b4.Latency {
		t.Fatalf("batch 4 point %+v", b4)
	}
	if res.GPU != "Given GPU" {
		t.Fatalf("GPU %q", res.GPU)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}
