package scheduler

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/openfaas/faas-provider/types"
)

// OpenFaaS scaling labels; faas-gpu reads them from labels, as the gateway
// does, and from annotations.
const (
	LabelScaleMin          = "com.openfaas.scale.min"
	LabelScaleMax          = "com.openfaas.scale.max"
	LabelScaleZero         = "com.openfaas.scale.zero"
	LabelScaleZeroDuration = "com.openfaas.scale.zero-duration"
	// AnnotationParked asks for that many of the function's processes kept
	// started ahead of its placements, off the GPU (lifecycle/parked.go).
	// The function's server must take its GPU settings after its start
	// (docs/replica-protocol.md); a backend that cannot park it, or a
	// server that shows it cannot, runs it without. "auto", the default,
	// leaves the count to the function's own starts (ParkedNeed); "0"
	// parks none.
	AnnotationParked = "com.openfaas.gpu.parked"
	// ParkedAuto is AnnotationParked's value that asks for a learnt count.
	ParkedAuto = "auto"
)

// Scale defaults, as DESIGN.md gives them.
const (
	DefaultMinReplicas  = 1
	DefaultMaxReplicas  = 20
	DefaultZeroDuration = 15 * time.Minute
)

// ScalePolicy bounds the replicas of one function.
type ScalePolicy struct {
	Min          int           `json:"min"`
	Max          int           `json:"max"`
	Zero         bool          `json:"zero"`
	ZeroDuration time.Duration `json:"zeroDuration"`
	// Parked is how many processes it keeps started ahead of its
	// placements (AnnotationParked); 0: none.
	Parked int `json:"parked,omitempty"`
	// ParkedAuto keeps as many as the function's starts showed it needs
	// at once (AnnotationParked "auto", ParkedNeed) instead of Parked.
	ParkedAuto bool `json:"parkedAuto,omitempty"`
	// ParkedDefault is set with ParkedAuto when the function did not say:
	// it parks where its backend and its server can, and a backend that
	// cannot says nothing of it, as it would of a function that asked.
	ParkedDefault bool `json:"parkedDefault,omitempty"`
}

// ParkedAsked is what the function asked of AnnotationParked: "auto", a
// count, or "" for none or for the default (ParkedDefault).
func (p ScalePolicy) ParkedAsked() string {
	switch {
	case p.ParkedDefault:
		return ""
	case p.ParkedAuto:
		return ParkedAuto
	case p.Parked > 0:
		return strconv.Itoa(p.Parked)
	}
	return ""
}

// ParseScalePolicy reads the com.openfaas.scale.* keys from labels, then
// from annotations, which win when both are set.
func ParseScalePolicy(labels, annotations map[string]string) (ScalePolicy, error) {
	p := ScalePolicy{Min: DefaultMinReplicas, Max: DefaultMaxReplicas, ZeroDuration: DefaultZeroDuration}
	get := func(k string) (string, string, bool) {
		if v, ok := annotations[k]; ok {
			return v, "annotations." + k, true
		}
		if v, ok := labels[k]; ok {
			return v, "labels." + k, true
		}
		return "", "", false
	}
	if v, field, ok := get(LabelScaleMin); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return ScalePolicy{}, &gpu.FieldError{Field: field, Reason: fmt.Sprintf("%q must be a whole number, 0 or more", v)}
		}
		p.Min = n
	}
	if v, field, ok := get(LabelScaleMax); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return ScalePolicy{}, &gpu.FieldError{Field: field, Reason: fmt.Sprintf("%q must be a whole number, 1 or more", v)}
		}
		p.Max = n
	}
	if p.Min > p.Max {
		return ScalePolicy{}, &gpu.FieldError{Field: LabelScaleMin, Reason: fmt.Sprintf("min %d is above max %d", p.Min, p.Max)}
	}
	if v, field, ok := get(LabelScaleZero); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return ScalePolicy{}, &gpu.FieldError{Field: field, Reason: fmt.Sprintf("%q must be true or false", v)}
		}
		p.Zero = b
	}
	if v, field, ok := get(LabelScaleZeroDuration); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 {
			return ScalePolicy{}, &gpu.FieldError{Field: field, Reason: fmt.Sprintf("%q must be a positive duration such as 15m", v)}
		}
		p.ZeroDuration = d
	}
	v, ok := annotations[AnnotationParked]
	if !ok {
		// A container's start is where the misses of a burst's new
		// replicas come from (docs/evaluation.md, "Parked processes by
		// default"), and a parked process costs host memory, not GPU.
		p.ParkedAuto, p.ParkedDefault = true, true
	} else {
		v = strings.TrimSpace(v)
		n, err := strconv.Atoi(v)
		switch {
		case v == ParkedAuto:
			p.ParkedAuto = true
		case err != nil || n < 0 || n > p.Max:
			return ScalePolicy{}, &gpu.FieldError{Field: "annotations." + AnnotationParked, Reason: fmt.Sprintf("%q must be %q or a whole number from 0 to the function's maximum replicas (%d)", v, ParkedAuto, p.Max)}
		default:
			p.Parked = n
		}
	}
	return p, nil
}

// InitialReplicas is how many replicas a new function starts with.
func (p ScalePolicy) InitialReplicas() int { return max(p.Min, 1) }

// Clamp keeps a requested replica count inside the policy; 0 stays 0 so an
// idler can scale a function down to nothing.
func (p ScalePolicy) Clamp(n int) int {
	if n == 0 {
		return 0
	}
	return min(max(n, p.Min), p.Max)
}

// Function is a validated deployment: the OpenFaaS request plus what faas-gpu
// parsed from it.
type Function struct {
	Deployment types.FunctionDeployment `json:"deployment"`
	GPU        gpu.Request              `json:"gpu"`
	Scale      ScalePolicy              `json:"scale"`
}

// Name is the function's name.
func (f Function) Name() string { return f.Deployment.Service }

// Namespace is the function's namespace.
func (f Function) Namespace() string { return f.Deployment.Namespace }
