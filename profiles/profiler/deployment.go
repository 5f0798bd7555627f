package profiler

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/openfaas/faas-provider/types"
)

// Keys the temporary copies are written with. They repeat gpu and
// scheduler's constants on purpose: these are the provider API's names,
// which a client must not take from the server's packages.
const (
	annotationSM    = "com.openfaas.gpu.sm"
	annotationModel = "com.openfaas.gpu.model"
	annotationSLO   = "com.openfaas.gpu.slo"
	scaleMin        = "com.openfaas.scale.min"
	scaleMax        = "com.openfaas.scale.max"
	scaleZero       = "com.openfaas.scale.zero"
	// labelEmulated is a status-only label of the local backend; a
	// deployment carrying it would claim what the provider decides.
	labelEmulated = "com.openfaas.gpu.emulated"
	// LabelCopyOf marks a temporary copy with the function it copies, so
	// a copy left by an interrupted run is recognised and replaced, and a
	// user's function of the same name never is.
	LabelCopyOf = "com.openfaas.gpu.profile-copy-of"
	// EnvBatch is the batch size the provider gives each replica.
	EnvBatch = "FAAS_GPU_BATCH"
)

// maxNameLen is the longest function name: a Kubernetes DNS label.
const maxNameLen = 63

// copyName is the temporary copy's name for one slice and batch:
// <name>-profile-<sm>, with -b<batch> when the batch is not 1.
func copyName(function string, sm, batch int) (string, error) {
	name := function + "-profile-" + strconv.Itoa(sm)
	if batch != 1 {
		name += "-b" + strconv.Itoa(batch)
	}
	if len(name) > maxNameLen {
		return "", fmt.Errorf("temporary function name %s is longer than %d characters: profile a function with a shorter name", name, maxNameLen)
	}
	return name, nil
}

// ModelOf is the model a function serves, as the provider reads it: its
// model annotation, else its name.
func ModelOf(st types.FunctionStatus) string {
	if st.Annotations != nil {
		if m := (*st.Annotations)[annotationModel]; m != "" {
			return m
		}
	}
	return st.Name
}

// copyDeployment is the function st deployed again as name, on a slice of
// sm % with batch: the same process, image, environment, secrets,
// constraints and GPU memory, exactly one replica, and no SLO (the slice
// is fixed, nothing may autoscale it away). The model annotation is set
// explicitly, since the copy's name would otherwise become its model and
// lose the original's profile and model-cache identity. Whole-GPU limits
// are dropped: the provider refuses them beside an SM %.
func copyDeployment(st types.FunctionStatus, name string, sm, batch int) types.FunctionDeployment {
	labels := map[string]string{}
	if st.Labels != nil {
		maps.Copy(labels, *st.Labels)
	}
	delete(labels, labelEmulated)
	annotations := map[string]string{}
	if st.Annotations != nil {
		maps.Copy(annotations, *st.Annotations)
	}
	delete(annotations, annotationSLO)
	annotations[annotationModel] = ModelOf(st)
	annotations[annotationSM] = strconv.Itoa(sm)
	// Both places: the gateway and faas-netes read labels, faas-gpu
	// prefers annotations, and the original may have set either.
	for _, m := range []map[string]string{labels, annotations} {
		m[scaleMin], m[scaleMax], m[scaleZero] = "1", "1", "false"
	}
	labels[LabelCopyOf] = st.Name

	env := map[string]string{}
	maps.Copy(env, st.EnvVars)
	env[EnvBatch] = strconv.Itoa(batch)

	return types.FunctionDeployment{
		Service:                name,
		Image:                  st.Image,
		Namespace:              st.Namespace,
		EnvProcess:             st.EnvProcess,
		EnvVars:                env,
		Constraints:            append([]string(nil), st.Constraints...),
		Secrets:                append([]string(nil), st.Secrets...),
		Labels:                 &labels,
		Annotations:            &annotations,
		Limits:                 withoutGPUs(st.Limits),
		Requests:               withoutGPUs(st.Requests),
		ReadOnlyRootFilesystem: st.ReadOnlyRootFilesystem,
	}
}

func withoutGPUs(r *types.FunctionResources) *types.FunctionResources {
	if r == nil {
		return nil
	}
	c := *r
	c.NvidiaGPU, c.AmdGPU, c.IntelGPU = "", "", ""
	if c == (types.FunctionResources{}) {
		return nil
	}
	return &c
}

// isCopyOf reports whether st is a temporary copy of function.
func isCopyOf(st types.FunctionStatus, function string) bool {
	return labelOf(st, LabelCopyOf) == function
}
