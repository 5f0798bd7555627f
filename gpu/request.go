package gpu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The annotations a function writes in stack.yml to describe its GPU needs;
// stack.yml has no field for GPUs, so annotations carry them.
const (
	AnnotationSM        = "com.openfaas.gpu.sm"
	AnnotationMemory    = "com.openfaas.gpu.memory"
	AnnotationModel     = "com.openfaas.gpu.model"
	AnnotationModelSize = "com.openfaas.gpu.model-size"
	AnnotationSLO       = "com.openfaas.gpu.slo"
	AnnotationProfile   = "com.openfaas.gpu.profile"

	// LimitNvidiaGPU is the faas-provider FunctionResources key for whole GPUs.
	LimitNvidiaGPU = "limits.nvidia.com/gpu"
)

// Request is what each replica of a function asks of the GPUs.
// Zero values mean "not given": the defaults of DESIGN.md apply.
type Request struct {
	// SMPercent is the MPS active-thread percentage, 1-100 (0: not given).
	SMPercent int `json:"smPercent,omitempty"`
	// MemoryBytes is the pinned device memory limit (0: the whole GPU).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// WholeGPUs asks for that many entire GPUs on one node instead of a slice.
	WholeGPUs int `json:"wholeGPUs,omitempty"`
	// Model identifies the model for cache locality and profile lookup.
	Model string `json:"model"`
	// ModelSizeBytes is what the model takes in GPU memory (0: unknown).
	ModelSizeBytes int64 `json:"modelSizeBytes,omitempty"`
	// SLO is the latency target the autoscaler holds (0: none).
	SLO time.Duration `json:"slo,omitempty"`
	// Profile names the profile to use (empty: the model's).
	Profile string `json:"profile,omitempty"`
}

// FieldError names the field of a request that was rejected and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// modelName keeps model and profile names safe to use as file names and
// metric labels.
var modelName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ParseRequest reads a function's GPU request from its annotations and the
// raw API's limits["nvidia.com/gpu"]. function is the default model name.
func ParseRequest(function string, annotations map[string]string, nvidiaGPU string) (Request, error) {
	req := Request{Model: function}

	if v, ok := annotations[AnnotationSM]; ok {
		sm, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return Request{}, fieldErr(AnnotationSM, "%q is not an integer percentage", v)
		}
		if sm < 1 || sm > 100 {
			return Request{}, fieldErr(AnnotationSM, "%d is outside 1-100", sm)
		}
		req.SMPercent = sm
	}
	if v, ok := annotations[AnnotationMemory]; ok {
		b, err := parseBytes(v)
		if err != nil {
			return Request{}, fieldErr(AnnotationMemory, "%s", err)
		}
		req.MemoryBytes = b
	}
	if v, ok := annotations[AnnotationModel]; ok {
		if !modelName.MatchString(v) {
			return Request{}, fieldErr(AnnotationModel, "%q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", v)
		}
		req.Model = v
	}
	if v, ok := annotations[AnnotationModelSize]; ok {
		b, err := parseBytes(v)
		if err != nil {
			return Request{}, fieldErr(AnnotationModelSize, "%s", err)
		}
		if req.MemoryBytes > 0 && b > req.MemoryBytes {
			return Request{}, fieldErr(AnnotationModelSize, "%s is larger than %s %s", v, AnnotationMemory, annotations[AnnotationMemory])
		}
		req.ModelSizeBytes = b
	}
	if v, ok := annotations[AnnotationSLO]; ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return Request{}, fieldErr(AnnotationSLO, "%q is not a duration such as 100ms", v)
		}
		if d <= 0 {
			return Request{}, fieldErr(AnnotationSLO, "%q must be positive", v)
		}
		req.SLO = d
	}
	if v, ok := annotations[AnnotationProfile]; ok {
		if !modelName.MatchString(v) {
			return Request{}, fieldErr(AnnotationProfile, "%q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", v)
		}
		req.Profile = v
	}
	if nvidiaGPU != "" {
		n, err := strconv.Atoi(strings.TrimSpace(nvidiaGPU))
		if err != nil || n < 1 {
			return Request{}, fieldErr(LimitNvidiaGPU, "%q must be a whole number of GPUs, at least 1 (use %s for a fraction)", nvidiaGPU, AnnotationSM)
		}
		if req.SMPercent != 0 && req.SMPercent != 100 {
			return Request{}, fieldErr(LimitNvidiaGPU, "asks for whole GPUs but %s asks for %d%%: give one or the other", AnnotationSM, req.SMPercent)
		}
		if req.MemoryBytes != 0 {
			return Request{}, fieldErr(LimitNvidiaGPU, "asks for whole GPUs but %s limits memory: give one or the other", AnnotationMemory)
		}
		req.WholeGPUs = n
	}
	return req, nil
}

func parseBytes(v string) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q is not a quantity such as 4Gi or 512Mi", v)
	}
	b := q.Value()
	if b <= 0 {
		return 0, fmt.Errorf("%q must be positive", v)
	}
	return b, nil
}

// GPUCount is how many GPUs one replica occupies.
func (r Request) GPUCount() int { return max(r.WholeGPUs, 1) }

// SliceOn is the slice a replica of r takes on dev: unset SM % means the
// whole GPU's threads, unset memory the whole GPU's memory.
func (r Request) SliceOn(dev Device) Slice {
	s := Slice{SMPercent: r.SMPercent, MemoryBytes: r.MemoryBytes}
	if r.WholeGPUs > 0 || s.SMPercent == 0 {
		s.SMPercent = 100
	}
	if r.WholeGPUs > 0 || s.MemoryBytes == 0 {
		s.MemoryBytes = dev.MemoryBytes
	}
	return s
}

// FormatBytes renders a byte count the way Kubernetes quantities read.
func FormatBytes(b int64) string {
	return resource.NewQuantity(b, resource.BinarySI).String()
}
