package lifecycle

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// EnvVar is one variable of a replica's environment.
type EnvVar struct{ Name, Value string }

// EnvInput is what a replica's environment is made of.
type EnvInput struct {
	Spec scheduler.Function
	// Model is the function's model (its plan's request).
	Model     string
	Config    scheduler.SliceConfig
	Placement scheduler.Placement
	// Devices name the placement's GPUs for NVIDIA_VISIBLE_DEVICES (the
	// device plugin's names); nil takes the placement's GPU UUIDs.
	Devices []string
	// InContainer is true where the replica sees only its own GPUs (a pod
	// under the NVIDIA runtime): CUDA then numbers them from 0, and
	// CUDA_VISIBLE_DEVICES lists those numbers. A local process sees every
	// GPU of the host, so it gets their names.
	InContainer bool
	MPSPipeDir  string
	// ModelDir is where the node's model store is mounted in the replica
	// (FAAS_GPU_MODEL_DIR); empty where there is no store.
	ModelDir string
	// Replica is the replica's ID, Group its Kubernetes replica group;
	// either may be empty.
	Replica, Group string
}

// placementEnv names the variables that place a replica: they win over a
// function's own variables of the same name, except FAAS_GPU_BATCH (see
// RenderEnv).
var placementEnv = map[string]bool{
	"NVIDIA_VISIBLE_DEVICES": true, "NVIDIA_DRIVER_CAPABILITIES": true, "CUDA_VISIBLE_DEVICES": true,
	"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": true, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": true, "CUDA_MPS_PIPE_DIRECTORY": true,
	"FAAS_GPU_MODEL": true, "FAAS_GPU_MODEL_DIR": true, "FAAS_GPU_REPLICA": true, "FAAS_GPU_REPLICA_GROUP": true, "fprocess": true,
}

// RenderEnv is a replica's environment, the same in every backend: the
// function's process as fprocess, its own variables sorted by name, then
// what places it. A function's own FAAS_GPU_BATCH wins over the plan's
// batch (as `faas-gpu profile` relies on to measure each batch it asks
// for); every other placement variable wins over the function's.
func RenderEnv(in EnvInput) []EnvVar {
	dep := in.Spec.Deployment
	env := FunctionEnv(in.Spec)
	p := in.Placement
	devices := in.Devices
	if len(devices) != len(p.GPUs) {
		devices = p.GPUs
	}
	cuda := devices
	limits := make([]string, len(p.GPUs))
	if in.InContainer {
		cuda = make([]string, len(p.GPUs))
	}
	for i := range p.GPUs {
		// CUDA numbers the visible devices from 0 inside the process.
		limits[i] = fmt.Sprintf("%d=%dM", i, p.Slice.MemoryBytes>>20)
		if in.InContainer {
			cuda[i] = strconv.Itoa(i)
		}
	}
	pipe := in.MPSPipeDir
	if pipe == "" {
		pipe = DefaultMPSPipeDir
	}
	env = append(env,
		EnvVar{"NVIDIA_VISIBLE_DEVICES", strings.Join(devices, ",")},
		EnvVar{"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"},
		EnvVar{"CUDA_VISIBLE_DEVICES", strings.Join(cuda, ",")},
		EnvVar{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", strconv.Itoa(p.Slice.SMPercent)},
		EnvVar{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", strings.Join(limits, ",")},
		EnvVar{"CUDA_MPS_PIPE_DIRECTORY", pipe},
		EnvVar{"FAAS_GPU_MODEL", in.Model},
	)
	if _, own := dep.EnvVars["FAAS_GPU_BATCH"]; !own {
		env = append(env, EnvVar{"FAAS_GPU_BATCH", strconv.Itoa(max(in.Config.Batch, 1))})
	}
	if in.ModelDir != "" {
		env = append(env, EnvVar{"FAAS_GPU_MODEL_DIR", in.ModelDir})
	}
	if in.Replica != "" {
		env = append(env, EnvVar{"FAAS_GPU_REPLICA", in.Replica})
	}
	if in.Group != "" {
		env = append(env, EnvVar{"FAAS_GPU_REPLICA_GROUP", in.Group})
	}
	return env
}

// FunctionEnv is the function's part of a replica's environment, the
// first of RenderEnv's: its process as fprocess and its own variables
// sorted by name, less those placement sets. A parked process
// (parked.go) starts with it alone.
func FunctionEnv(spec scheduler.Function) []EnvVar {
	dep := spec.Deployment
	var env []EnvVar
	if dep.EnvProcess != "" {
		env = append(env, EnvVar{"fprocess", dep.EnvProcess})
	} else if v, ok := dep.EnvVars["fprocess"]; ok {
		env = append(env, EnvVar{"fprocess", v})
	}
	keys := make([]string, 0, len(dep.EnvVars))
	for k := range dep.EnvVars {
		if !placementEnv[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, EnvVar{k, dep.EnvVars[k]})
	}
	return env
}

// DefaultMPSPipeDir is where the MPS control daemon listens by default.
const DefaultMPSPipeDir = "/tmp/nvidia-mps"

// ReplicaBatch is the batch size a replica of spec on slice cfg is told
// (FAAS_GPU_BATCH, as RenderEnv renders it): the function's own value
// when it is a positive number, else the slice's. The proxy's pull
// dispatch hands a replica this many requests at once, so it must be the
// batch the replica gathers, not only the plan's. A slice with no batch
// (no profile) stays so: such a replica is not held back.
func ReplicaBatch(spec scheduler.Function, cfg scheduler.SliceConfig) int {
	if cfg.Batch <= 0 {
		return cfg.Batch
	}
	if v, ok := spec.Deployment.EnvVars["FAAS_GPU_BATCH"]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			return n
		}
	}
	return cfg.Batch
}
