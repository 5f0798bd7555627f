package profiler

import (
	"slices"
	"testing"
	"time"
)

func TestOptionsCheck(t *testing.T) {
	good := Options{Function: "fn", SMs: []int{50, 10}, Duration: time.Second, Concurrency: 4}
	tests := []struct {
		name   string
		change func(*Options)
		want   string // "" : valid
	}{
		{"valid", func(*Options) {}, ""},
		{"no function", func(o *Options) { o.Function = "" }, "function: a function name is needed"},
		{"no sm", func(o *Options) { o.SMs = nil }, "sm: at least one SM percentage is needed"},
		{"sm 0", func(o *Options) { o.SMs = []int{0} }, "sm: 0 is outside 1-100"},
		{"sm 101", func(o *Options) { o.SMs = []int{10, 101} }, "sm: 101 is outside 1-100"},
		{"sm twice", func(o *Options) { o.SMs = []int{10, 10} }, "sm: 10 is given twice"},
		{"batch 0", func(o *Options) { o.Batches = []int{0} }, "batch: 0 is outside 1-1024"},
		{"zero duration", func(o *Options) { o.Duration = 0 }, "duration: 0s must be positive"},
		{"negative warm-up", func(o *Options) { o.Warmup = -time.Second }, "warmup: -1s must not be negative"},
		{"no concurrency", func(o *Options) { o.Concurrency = 0 }, "concurrency: 0 must be at least 1"},
		{"negative ready timeout", func(o *Options) { o.ReadyTimeout = -1 }, "ready-timeout: -1ns must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			o.SMs = slices.Clone(good.SMs)
			tt.change(&o)
			err := o.Check()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Check() = %q, want %q", got, tt.want)
			}
		})
	}
	o, _ := good.withDefaults()
	if !slices.Equal(o.SMs, []int{10, 50}) || !slices.Equal(o.Batches, []int{1}) || o.ReadyTimeout != 2*time.Minute {
		t.Fatalf("defaults: %+v", o)
	}
	if good.SMs[0] != 50 {
		t.Fatal("withDefaults sorted the caller's slice")
	}
}
