package k8s

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A parked pod takes a replica only where its container sees the
// replica's GPUs by a UUID CUDA knows, and runs.
func TestCanHandOver(t *testing.T) {
	pod := func(visible string, phase corev1.PodPhase, ip string) *corev1.Pod {
		return &corev1.Pod{
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: visible}}}}},
			Status: corev1.PodStatus{Phase: phase, PodIP: ip},
		}
	}
	deleted := pod("GPU-a,GPU-b", corev1.PodRunning, "10.0.0.1")
	deleted.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		devices []string
		want    bool
	}{
		{"sees it", pod("GPU-a,GPU-b", corev1.PodRunning, "10.0.0.1"), []string{"GPU-b"}, true},
		{"sees every one of two", pod("GPU-a,GPU-b", corev1.PodRunning, "10.0.0.1"), []string{"GPU-a", "GPU-b"}, true},
		{"a GPU opened after it started", pod("GPU-a", corev1.PodRunning, "10.0.0.1"), []string{"GPU-b"}, false},
		{"every GPU of its node (-k8s-parked-sees all)", pod("all", corev1.PodRunning, "10.0.0.1"), []string{"GPU-b"}, true},
		{"every GPU, but one CUDA cannot name", pod("all", corev1.PodRunning, "10.0.0.1"), []string{"1"}, false},
		{"no GPU held on its node then", pod("none", corev1.PodRunning, "10.0.0.1"), []string{"GPU-a"}, false},
		{"a device by index (GPU Feature Discovery)", pod("0,1", corev1.PodRunning, "10.0.0.1"), []string{"1"}, false},
		{"not running", pod("GPU-a", corev1.PodPending, ""), []string{"GPU-a"}, false},
		{"being deleted", deleted, []string{"GPU-a"}, false},
		{"gone", nil, []string{"GPU-a"}, false},
		{"no devices", pod("GPU-a", corev1.PodRunning, "10.0.0.1"), nil, false},
	}
	for _, tt := range tests {
		if got := canHandOver(tt.pod, tt.devices); got != tt.want {
			t.Errorf("%s: canHandOver = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// What a parked pod reports it can be handed is, in the core's terms, the
// GPUs of its node whose device, as a hand-over names it, the pod sees.
func TestParkedSight(t *testing.T) {
	pod := func(visible string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: visible}}}}}}
	}
	tests := []struct {
		name     string
		visible  string
		deviceOf map[string]string
		want     []string
	}{
		{"the GPUs held when it was created", "GPU-a1", nil, []string{"GPU-a1"}},
		{"every GPU of its node, not another node's", "all", nil, []string{"GPU-a0", "GPU-a1"}},
		{"none held then", "none", nil, []string{}},
		{"a GPU as its placeholder names it", "GPU-real", map[string]string{"GPU-a0": "GPU-real"}, []string{"GPU-a0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(cluster2x2(), coreOptions(nil, scheduler.AutoscaleOptions{}), nil)
			if tt.deviceOf != nil {
				st.deviceOf = tt.deviceOf
			}
			got := st.parkedSight(pod(tt.visible), "a")
			if got.All || !slices.Equal(got.GPUs, tt.want) {
				t.Errorf("sight %+v, want GPUs %v", got, tt.want)
			}
		})
	}
}

// A parked pod is the function's pod with the parked environment: no GPU
// settings, the node's held GPUs visible, no liveness probe (a parked
// server may answer 503), out of the function's selector and owned by its
// record.
func TestRenderParkedPod(t *testing.T) {
	f := spec("fn", 30, nil)
	f.Deployment.EnvVars = map[string]string{"MODE": "x", "CUDA_VISIBLE_DEVICES": "7"}
	owner := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "fn", UID: "u1"}}
	p := renderParkedPod(f, "fn#00ff", "node-a", []string{"GPU-a", "GPU-b"}, owner, renderOptions{Port: 8080, MPSPipeDir: "/mps"})
	if p.Name != "fn-parked-00ff" || p.Namespace != "ns" || p.Annotations[AnnotationParkedID] != "fn#00ff" {
		t.Errorf("pod %s/%s annotations %v", p.Namespace, p.Name, p.Annotations)
	}
	if p.Labels[LabelParked] != "fn" || p.Labels[LabelFunction] != "" || p.Labels[LabelGroup] != "" || p.Labels[LabelManagedBy] != managedBy {
		t.Errorf("labels %v; want parked, managed, out of the function's selector and of every group", p.Labels)
	}
	if _, ok := p.Annotations[AnnotationPlacement]; ok {
		t.Errorf("annotations %v carry a placement", p.Annotations)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "u1" || p.OwnerReferences[0].Kind != "Service" {
		t.Errorf("owners %v; want the function's record", p.OwnerReferences)
	}
	c := p.Spec.Containers[0]
	if c.LivenessProbe != nil || c.ReadinessProbe == nil {
		t.Errorf("probes: liveness %v, readiness %v; want readiness only", c.LivenessProbe, c.ReadinessProbe)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s set twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	want := map[string]string{"MODE": "x", "FAAS_GPU_PARKED": "1", "CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "CUDA_MPS_PIPE_DIRECTORY": "/mps"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "FAAS_GPU_MODEL", "FAAS_GPU_BATCH"} {
		if _, ok := env[k]; ok {
			t.Errorf("parked pod has %s", k)
		}
	}
	if a, want := p.Spec.Affinity, pinTo("node-a"); a == nil || a.String() != want.String() {
		t.Errorf("affinity %v; want pinned to node-a", a)
	}
	if none := renderParkedPod(f, "fn#1", "node-b", nil, owner, renderOptions{}); podVisible(none) != nil {
		t.Errorf("a pod on a node with no GPU held sees %v, want none", podVisible(none))
	}
	if all := renderParkedPod(f, "fn#2", "node-b", []string{ParkedSeesAll}, owner, renderOptions{}); !canHandOver(&corev1.Pod{Spec: all.Spec,
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.2"}}, []string{"GPU-z"}) {
		t.Errorf("a pod rendered to see every GPU (%v) cannot take GPU-z", podVisible(all))
	}
}

// metadataPatch is a merge patch of an object's labels (nil: removed)
// and annotations.
type metadataPatch struct {
	Metadata struct {
		Labels      map[string]*string `json:"labels"`
		Annotations map[string]string  `json:"annotations"`
	} `json:"metadata"`
}

func decodeMetadataPatch(t *testing.T, raw []byte) metadataPatch {
	t.Helper()
	var p metadataPatch
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// The adoption makes the pod its group's, as a pod of the group's
// Deployment is labelled and annotated, and no longer parked.
func TestAdoptionPatch(t *testing.T) {
	pl := scheduler.Placement{Node: "node-a", GPUs: []string{"GPU-a"}, Slice: gpu.Slice{SMPercent: 30, MemoryBytes: 4 << 30}}
	patch := decodeMetadataPatch(t, adoptionPatch("fn", "fn-g1", pl, scheduler.SliceConfig{Batch: 4}, "m", 2, false))
	l := patch.Metadata.Labels
	if l[LabelParked] != nil || *l[LabelFunction] != "fn" || *l[LabelGroup] != "fn-g1" || *l[LabelAdopted] != "true" {
		t.Errorf("labels %v", l)
	}
	if _, ok := l["pod-template-hash"]; ok {
		t.Error("pod-template-hash set: the group's ReplicaSet would own it")
	}
	a := patch.Metadata.Annotations
	rec, err := decodePlacement(a[AnnotationPlacement])
	if err != nil || rec.Placement.Node != "node-a" || rec.Placement.Slice.SMPercent != 30 || rec.Config.Batch != 4 {
		t.Errorf("placement %q: %+v, %v", a[AnnotationPlacement], rec, err)
	}
	if a[AnnotationModel] != "m" || a[AnnotationAdoptedRestarts] != "2" {
		t.Errorf("annotations %v", a)
	}
	if _, ok := l[LabelWarm]; ok {
		t.Errorf("a replica in service's pod labelled %s", LabelWarm)
	}
	// A standby's pod is out of routing from its adoption on.
	standby := decodeMetadataPatch(t, adoptionPatch("fn", "fn-g1", pl, scheduler.SliceConfig{Batch: 4}, "m", 0, true))
	if w := standby.Metadata.Labels[LabelWarm]; w == nil || *w != "true" || standby.Metadata.Annotations[annotationDeletionCost] != warmDeletionCost {
		t.Errorf("a standby's adoption: labels %v, annotations %v; want it warm, as warmPatch labels it", standby.Metadata.Labels, standby.Metadata.Annotations)
	}
}

// With -k8s-parked, a function parks when it asks, or by default when its
// own environment declares its server speaks /_/gpu.
func TestCanPark(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		env  map[string]string
		want bool
	}{
		{"asks", map[string]string{"com.openfaas.gpu.parked": "1"}, nil, true},
		{"asks auto", map[string]string{"com.openfaas.gpu.parked": "auto"}, nil, true},
		{"asks none", map[string]string{"com.openfaas.gpu.parked": "0"}, map[string]string{"FAAS_GPU_PARKABLE": "1"}, false},
		{"default, declared", nil, map[string]string{"FAAS_GPU_PARKABLE": "1"}, true},
		{"default, not declared", nil, nil, false},
	}
	for _, tt := range tests {
		f := spec("fn", 30, nil)
		pol, err := scheduler.ParseScalePolicy(nil, tt.ann)
		if err != nil {
			t.Fatal(err)
		}
		f.Scale, f.Deployment.EnvVars = pol, tt.env
		if got := canPark(f); got != tt.want {
			t.Errorf("%s: canPark = %v, want %v", tt.name, got, tt.want)
		}
	}
}
