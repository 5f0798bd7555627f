package profiler

// GPUReport is the part of the provider's /system/gpus answer the profiler
// reads: which GPU product a function's replica landed on, and why a
// replica still waits. Only these fields are decoded, so the profiler does
// not break when the report grows.
type GPUReport struct {
	Nodes []struct {
		Name string `json:"name"`
		GPUs []struct {
			Product  string `json:"product"`
			Replicas []struct {
				Function  string `json:"function"`
				Namespace string `json:"namespace"`
				Idle      bool   `json:"idle"`
			} `json:"replicas"`
		} `json:"gpus"`
	} `json:"nodes"`
	Pending []struct {
		Function  string `json:"function"`
		Namespace string `json:"namespace"`
		Reason    string `json:"reason"`
	} `json:"pending"`
}

// ProductOf is the GPU product a replica of the function in service runs
// on; ok is false when it has none placed.
func (r GPUReport) ProductOf(name, namespace string) (product string, ok bool) {
	for _, n := range r.Nodes {
		for _, g := range n.GPUs {
			for _, rep := range g.Replicas {
				if rep.Function == name && rep.Namespace == namespace && !rep.Idle {
					return g.Product, true
				}
			}
		}
	}
	return "", false
}

// PendingReason is why a replica of the function waits for a GPU, "" when
// none does.
func (r GPUReport) PendingReason(name, namespace string) string {
	for _, p := range r.Pending {
		if p.Function == name && p.Namespace == namespace {
			return p.Reason
		}
	}
	return ""
}
