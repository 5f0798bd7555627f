package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Function is one deployed function, as its stack.yml would describe it.
type Function struct {
	// Name is the OpenFaaS function name.
	Name string
	// Model is the model its replicas are sized and profiled by
	// (com.openfaas.gpu.model).
	Model string
	// Models, for a function that serves many models (requests carry
	// X-Model), lists them most requested first; Models[0] == Model.
	// Empty for a one-model function.
	Models []string
	// SLO is the latency target (com.openfaas.gpu.slo); 0: none.
	SLO time.Duration
	// SMPercent and MemoryBytes are explicit com.openfaas.gpu.sm and
	// com.openfaas.gpu.memory; 0: the policy chooses.
	SMPercent   int
	MemoryBytes int64
	// Min and Max bound the replicas (com.openfaas.scale.min/max);
	// 0 takes the OpenFaaS defaults 1 and 20.
	Min, Max int
}

// MultiModel reports whether requests to f name their model.
func (f Function) MultiModel() bool { return len(f.Models) > 1 }

func (f Function) minReplicas() int {
	if f.Min <= 0 {
		return 1
	}
	return f.Min
}

func (f Function) maxReplicas() int {
	if f.Max <= 0 {
		return 20
	}
	return max(f.Max, f.minReplicas())
}

// Arrival is one request: when it arrives, to which function, for which
// model (indexes into Workload.Functions and Workload.Models). 16 bytes, so
// a million fit in 16 MB.
type Arrival struct {
	At    time.Duration
	Fn    int32
	Model int32
}

// Workload is what a run replays: the deployed functions and every request
// in time order.
type Workload struct {
	Name      string
	Functions []Function
	// Models are the models requests name, indexed by Arrival.Model.
	Models   []string
	Arrivals []Arrival
	// Duration is the length of the offered load; throughput is measured
	// over it.
	Duration time.Duration
}

// Validate checks that arrivals are in time order and refer to known
// functions and models, and that each request's model is one its function
// serves.
func (w *Workload) Validate() error {
	if len(w.Functions) == 0 {
		return errors.New("workload: no functions")
	}
	if w.Duration <= 0 {
		return errors.New("workload: duration must be positive")
	}
	names := map[string]bool{}
	for i, f := range w.Functions {
		switch {
		case f.Name == "":
			return fmt.Errorf("workload: function %d has no name", i)
		case names[f.Name]:
			return fmt.Errorf("workload: function %q listed twice", f.Name)
		case f.Model == "":
			return fmt.Errorf("workload: function %q has no model", f.Name)
		case len(f.Models) > 0 && f.Models[0] != f.Model:
			return fmt.Errorf("workload: function %q: models[0] %q is not its model %q", f.Name, f.Models[0], f.Model)
		case f.Min > 0 && f.Max > 0 && f.Min > f.Max:
			return fmt.Errorf("workload: function %q: min %d above max %d", f.Name, f.Min, f.Max)
		}
		names[f.Name] = true
	}
	serves := make([]map[string]bool, len(w.Functions))
	for i, f := range w.Functions {
		serves[i] = map[string]bool{f.Model: true}
		for _, m := range f.Models {
			serves[i][m] = true
		}
	}
	var last time.Duration
	for i, a := range w.Arrivals {
		switch {
		case a.At < last:
			return fmt.Errorf("workload: request %d at %s is before request %d at %s", i, a.At, i-1, last)
		case a.Fn < 0 || int(a.Fn) >= len(w.Functions):
			return fmt.Errorf("workload: request %d: function %d unknown", i, a.Fn)
		case a.Model < 0 || int(a.Model) >= len(w.Models):
			return fmt.Errorf("workload: request %d: model %d unknown", i, a.Model)
		case !serves[a.Fn][w.Models[a.Model]]:
			return fmt.Errorf("workload: request %d: function %q does not serve model %q", i, w.Functions[a.Fn].Name, w.Models[a.Model])
		}
		last = a.At
	}
	return nil
}

// ProfiledModels lists every model the workload needs a profile for.
func (w *Workload) ProfiledModels() []string {
	set := map[string]bool{}
	for _, m := range w.Models {
		set[m] = true
	}
	for _, f := range w.Functions {
		set[f.Model] = true
	}
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// canonicalize orders functions and models by name (arrivals follow), so
// that a workload and the trace written from it replay identically: a
// trace lists functions in no order of its own.
func (w *Workload) canonicalize() {
	fnOrder := make([]int, len(w.Functions))
	for i := range fnOrder {
		fnOrder[i] = i
	}
	slices.SortStableFunc(fnOrder, func(a, b int) int { return strings.Compare(w.Functions[a].Name, w.Functions[b].Name) })
	fnNew := make([]int32, len(fnOrder))
	fns := make([]Function, len(fnOrder))
	for to, from := range fnOrder {
		fnNew[from] = int32(to)
		fns[to] = w.Functions[from]
	}
	models := slices.Clone(w.Models)
	slices.Sort(models)
	modelNew := make([]int32, len(w.Models))
	for from, name := range w.Models {
		i, _ := slices.BinarySearch(models, name)
		modelNew[from] = int32(i)
	}
	for i := range w.Arrivals {
		a := &w.Arrivals[i]
		a.Fn, a.Model = fnNew[a.Fn], modelNew[a.Model]
	}
	w.Functions, w.Models = fns, models
}
