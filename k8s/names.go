package k8s

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Labels and annotations faas-gpu puts on the objects it owns.
const (
	// LabelFunction is faas-netes' label: every Deployment, Pod and Service
	// of a function carries faas_function=<name>.
	LabelFunction = "faas_function"
	// LabelManagedBy marks objects faas-gpu owns; the informers watch only
	// those.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "faas-gpu"
	// LabelGroup names the replica group (the Deployment) a pod belongs to.
	LabelGroup = "gpu.faas-gpu.dev/group"
	// LabelReservation marks the placeholder pods that hold GPUs against the
	// NVIDIA device plugin; its value is the GPU's key (see reservationName).
	LabelReservation = "gpu.faas-gpu.dev/reservation"
	// LabelNamespace marks namespaces OpenFaaS may deploy into, as
	// faas-netes and faasd do.
	LabelNamespace = "openfaas"
	// LabelSecretManagedBy is the label faas-netes gives secrets made
	// through the API; listing returns only those.
	secretManagedBy = "openfaas"

	// AnnotationPlacement is the source of truth for where a group's
	// replicas run: JSON of placementRecord. A restarted provider books
	// exactly this again.
	AnnotationPlacement = "gpu.faas-gpu.dev/placement"
	// Human-readable copies of the placement, for kubectl users.
	AnnotationGPUs      = "gpu.faas-gpu.dev/gpu-uuids"
	AnnotationNode      = "gpu.faas-gpu.dev/node"
	AnnotationSMPercent = "gpu.faas-gpu.dev/sm-percent"
	AnnotationMemory    = "gpu.faas-gpu.dev/memory"
	// AnnotationSpecHash is a hash of what faas-gpu rendered, so an
	// unchanged object is not written again.
	AnnotationSpecHash = "gpu.faas-gpu.dev/spec-hash"
	// AnnotationFunction holds the function as deployed (JSON of
	// scheduler.Function) on the function's Service, its durable record.
	AnnotationFunction = "gpu.faas-gpu.dev/function"
	// AnnotationReplicas is the function's desired replica count, on the
	// same Service.
	AnnotationReplicas = "gpu.faas-gpu.dev/replicas"
	// AnnotationModel is the model a replica loads, on pods.
	AnnotationModel = "gpu.faas-gpu.dev/model"
)

// secretsMountPath is where OpenFaaS functions read their secrets.
const secretsMountPath = "/var/openfaas/secrets"

// placementRecord is the content of AnnotationPlacement.
type placementRecord struct {
	Placement scheduler.Placement   `json:"placement"`
	Config    scheduler.SliceConfig `json:"config"`
}

func encodePlacement(p scheduler.Placement, c scheduler.SliceConfig) string {
	b, _ := json.Marshal(placementRecord{Placement: p, Config: c}) // plain structs: cannot fail
	return string(b)
}

func decodePlacement(v string) (placementRecord, error) {
	var r placementRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return placementRecord{}, fmt.Errorf("annotation %s: %w", AnnotationPlacement, err)
	}
	if r.Placement.Node == "" || len(r.Placement.GPUs) == 0 || r.Placement.Slice.SMPercent <= 0 {
		return placementRecord{}, fmt.Errorf("annotation %s: no node, GPU or SM share in %q", AnnotationPlacement, v)
	}
	return r, nil
}

// placementAnnotations are the annotations a group's Deployment and pods
// carry.
func placementAnnotations(p scheduler.Placement, c scheduler.SliceConfig) map[string]string {
	return map[string]string{
		AnnotationPlacement: encodePlacement(p, c),
		AnnotationGPUs:      strings.Join(p.GPUs, ","),
		AnnotationNode:      p.Node,
		AnnotationSMPercent: strconv.Itoa(p.Slice.SMPercent),
		AnnotationMemory:    gpu.FormatBytes(p.Slice.MemoryBytes),
	}
}

// maxGroupName is the longest group name: it is the value of the
// LabelGroup label on the Deployment and its pods, which Kubernetes caps
// at 63 bytes.
const maxGroupName = 63

// groupName names the Deployment of a function's replicas that share one
// placement: one GPU (or set of whole GPUs) and one slice. The name is a
// pure function of them, so a restarted provider, or a second sync, finds
// the same object.
func groupName(fnName string, p scheduler.Placement, c scheduler.SliceConfig) string {
	return groupNameN(fnName, p, c, 1)
}

// groupNameN is groupName for the n-th group of one placement (n > 1 when
// a Deployment of the first name still drains: see freeGroupName). A name
// that would pass maxGroupName keeps a prefix of the function's name and
// hashes the whole name with the placement, so two long names sharing a
// prefix still differ. Names that fit are as they always were, so an
// upgraded provider finds the Deployments it made before.
func groupNameN(fnName string, p scheduler.Placement, c scheduler.SliceConfig, n int) string {
	gpus := append([]string(nil), p.GPUs...)
	sort.Strings(gpus)
	where := fmt.Sprintf("%s|%s|%d|%d|%d", p.Node, strings.Join(gpus, ","), p.Slice.SMPercent, p.Slice.MemoryBytes, max(c.Batch, 1))
	count := ""
	if n > 1 {
		count = "-" + strconv.Itoa(n)
	}
	h := sha256.Sum256([]byte(where))
	suffix := "-" + hex.EncodeToString(h[:4]) + count
	if len(fnName)+len(suffix) <= maxGroupName {
		return fnName + suffix
	}
	h = sha256.Sum256([]byte(fnName + "|" + where))
	suffix = "-" + hex.EncodeToString(h[:4]) + count
	return fnName[:maxGroupName-len(suffix)] + suffix
}

// reservationName names the placeholder pod holding gpuUUID.
func reservationName(gpuUUID string) string { return "faas-gpu-reserve-" + gpuKey(gpuUUID) }

// gpuKey is a label-safe key of a GPU UUID (GFD-made UUIDs hold a '/').
func gpuKey(gpuUUID string) string {
	h := sha256.Sum256([]byte(gpuUUID))
	return hex.EncodeToString(h[:6])
}

// newReplicaID names one booking in the allocator; only unique within this
// provider's memory, never stored.
func newReplicaID(group string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return group + "#" + hex.EncodeToString(b[:])
}

func fnKey(ns, name string) string { return ns + "/" + name }

func splitKey(k string) (ns, name string) {
	ns, name, _ = strings.Cut(k, "/")
	return ns, name
}
