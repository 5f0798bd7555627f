package gpu

import (
	"fmt"
	"math"
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

// Aliases: the keys other GPU-sharing stacks use for the same requests, read
// so that a function moves to faas-gpu without rewriting its stack.yml
// (README.md, "Coming from HAMi / KAI / FaST-GShare").
const (
	// HAMi asks in container limits; faas-provider's FunctionResources has
	// no field for them, so faas-gpu reads them as annotations.
	AliasHAMiCores         = "nvidia.com/gpucores"          // % of the GPU's cores
	AliasHAMiMemory        = "nvidia.com/gpumem"            // MiB
	AliasHAMiMemoryPercent = "nvidia.com/gpumem-percentage" // % of the GPU's memory
	AliasKAIFraction       = "gpu-fraction"                 // share of one GPU, 0-1
	AliasKAIMemory         = "gpu-memory"                   // MiB
	AliasFaSTSM            = "fastgshare/gpu_sm_partition"  // MPS active-thread %
	AliasFaSTMemory        = "fastgshare/gpu_mem"           // bytes
	AliasFaSTQuotaRequest  = "fastgshare/gpu_quota_request" // share of GPU time, 0-1
	AliasFaSTQuotaLimit    = "fastgshare/gpu_quota_limit"   // share of GPU time, 0-1
)

// Request is what each replica of a function asks of the GPUs.
// Zero values mean "not given": the defaults of DESIGN.md apply.
type Request struct {
	// SMPercent is the MPS active-thread percentage, 1-100 (0: not given).
	SMPercent int `json:"smPercent,omitempty"`
	// MemoryBytes is the pinned device memory limit (0: the whole GPU).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// MemoryPercent is the memory limit as a share of the GPU the replica
	// lands on, 1-100 (0: not given), as HAMi's and KAI's requests put
	// it: no bytes can be known before the GPU is. It wins over
	// MemoryBytes, which a plan may fill in from a profile.
	MemoryPercent int `json:"memoryPercent,omitempty"`
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
// The aliases of other GPU-sharing stacks are read too; two keys that ask
// for different values of one thing are refused, naming both.
func ParseRequest(function string, annotations map[string]string, nvidiaGPU string) (Request, error) {
	req := Request{Model: function}

	var sm, memPct setting[int]
	var mem setting[int64]
	for _, src := range []struct {
		key   string
		parse func(string) (int, error)
	}{
		{AnnotationSM, parsePercent},
		{AliasHAMiCores, parsePercent},
		{AliasFaSTSM, parsePercent},
		{AliasKAIFraction, parseFraction},
	} {
		if v, ok := annotations[src.key]; ok {
			n, err := src.parse(v)
			if err != nil {
				return Request{}, fieldErr(src.key, "%s", err)
			}
			if err := sm.put(src.key, n, v); err != nil {
				return Request{}, err
			}
		}
	}
	for _, src := range []struct {
		key   string
		parse func(string) (int64, error)
	}{
		{AnnotationMemory, parseBytes},
		{AliasHAMiMemory, parseMiB},
		{AliasKAIMemory, parseMiB},
		{AliasFaSTMemory, parseBytes},
	} {
		if v, ok := annotations[src.key]; ok {
			b, err := src.parse(v)
			if err != nil {
				return Request{}, fieldErr(src.key, "%s", err)
			}
			if err := mem.put(src.key, b, v); err != nil {
				return Request{}, err
			}
		}
	}
	for _, src := range []struct {
		key   string
		parse func(string) (int, error)
	}{
		{AliasHAMiMemoryPercent, parsePercent},
		{AliasKAIFraction, parseFraction},
	} {
		if v, ok := annotations[src.key]; ok {
			n, err := src.parse(v)
			if err != nil {
				return Request{}, fieldErr(src.key, "%s", err)
			}
			if err := memPct.put(src.key, n, v); err != nil {
				return Request{}, err
			}
		}
	}
	if mem.from != "" && memPct.from != "" {
		return Request{}, fieldErr(mem.from, "%q and %s %q both limit memory, in bytes and as a share of the GPU: give one",
			mem.raw, memPct.from, memPct.raw)
	}
	req.SMPercent, req.MemoryBytes, req.MemoryPercent = sm.val, mem.val, memPct.val
	if err := checkQuota(annotations); err != nil {
		return Request{}, err
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
			return Request{}, fieldErr(AnnotationModelSize, "%s is larger than %s %s", v, mem.from, mem.raw)
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
		if hami := hamiKey(annotations); hami != "" {
			// HAMi's nvidia.com/gpu counts shared GPUs, and its other
			// limits size the share of each: one is a slice here.
			if n != 1 {
				return Request{}, fieldErr(LimitNvidiaGPU, "%d shared GPUs with %s: a faas-gpu slice is on one GPU, ask for 1", n, hami)
			}
			return req, nil
		}
		if req.SMPercent != 0 && req.SMPercent != 100 {
			return Request{}, fieldErr(LimitNvidiaGPU, "asks for whole GPUs but %s asks for %d%%: give one or the other", sm.from, req.SMPercent)
		}
		if req.MemoryBytes != 0 || req.MemoryPercent != 0 {
			return Request{}, fieldErr(LimitNvidiaGPU, "asks for whole GPUs but %s limits memory: give one or the other", mem.from+memPct.from)
		}
		req.WholeGPUs = n
	}
	return req, nil
}

// setting is one value of a request and the key that gave it, so that a
// second key asking for another value is refused naming both.
type setting[T comparable] struct {
	val       T
	from, raw string
}

func (s *setting[T]) put(key string, v T, raw string) error {
	if s.from != "" && s.val != v {
		return fieldErr(s.from, "%q and %s %q ask for different values: give one", s.raw, key, raw)
	}
	if s.from == "" {
		s.val, s.from, s.raw = v, key, raw
	}
	return nil
}

// hamiKey is the first HAMi limit among the annotations, "" for none.
func hamiKey(annotations map[string]string) string {
	for _, k := range []string{AliasHAMiCores, AliasHAMiMemory, AliasHAMiMemoryPercent} {
		if _, ok := annotations[k]; ok {
			return k
		}
	}
	return ""
}

// checkQuota validates FaST-GShare's time quotas, which faas-gpu reads and
// does not apply: it shares a GPU in space (MPS SM partitions), with no
// time slicing, so a replica runs whenever it has work.
func checkQuota(annotations map[string]string) error {
	var req, limit float64
	for _, q := range []struct {
		key string
		to  *float64
	}{{AliasFaSTQuotaRequest, &req}, {AliasFaSTQuotaLimit, &limit}} {
		v, ok := annotations[q.key]
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f > 0 && f <= 1) {
			return fieldErr(q.key, "%q is not a share of GPU time in (0, 1]", v)
		}
		*q.to = f
	}
	if req > 0 && limit > 0 && req > limit {
		return fieldErr(AliasFaSTQuotaRequest, "%v is above %s %v", req, AliasFaSTQuotaLimit, limit)
	}
	return nil
}

// parsePercent reads a whole percentage, 1-100.
func parsePercent(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer percentage", v)
	}
	if n < 1 || n > 100 {
		return 0, fmt.Errorf("%d is outside 1-100", n)
	}
	return n, nil
}

// parseFraction reads KAI's share of a GPU, in (0, 1], as a percentage;
// a share below 1 % rounds up to 1, the smallest slice there is.
func parseFraction(v string) (int, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f > 0 && f <= 1) {
		return 0, fmt.Errorf("%q is not a share of one GPU in (0, 1]", v)
	}
	return max(int(math.Round(f*100)), 1), nil
}

// parseMiB reads a whole number of MiB, as HAMi and KAI write memory.
func parseMiB(v string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number of MiB", v)
	}
	if n <= 0 || n > math.MaxInt64>>20 {
		return 0, fmt.Errorf("%q must be a positive number of MiB", v)
	}
	return n << 20, nil
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
	if r.MemoryPercent > 0 && r.WholeGPUs == 0 {
		s.MemoryBytes = dev.MemoryBytes * int64(r.MemoryPercent) / 100
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
