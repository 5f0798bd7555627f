package k8s

import (
	"fmt"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if _, dup := out[e.Name]; dup {
			out[e.Name] = "DUPLICATE"
			continue
		}
		out[e.Name] = e.Value
	}
	return out
}

func TestRenderDeployment(t *testing.T) {
	f := spec("f", 50, map[string]string{"team": "x", LabelFunction: "spoofed"})
	f.Deployment.EnvVars = map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100", "A": "1", "fprocess": "env-process"}
	cfg := scheduler.SliceConfig{SMPercent: 50, Batch: 4}
	tests := []struct {
		name  string
		g     groupSpec
		o     renderOptions
		check func(t *testing.T, c corev1.Container, pod corev1.PodSpec)
	}{
		{"placement wins over the function's env", groupSpec{Placement: placement("a", "GPU-a0")}, renderOptions{}, func(t *testing.T, c corev1.Container, _ corev1.PodSpec) {
			e := envOf(c)
			if e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" || e["A"] != "1" || e["fprocess"] != "env-process" || e["FAAS_GPU_BATCH"] != "4" || e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=4096M" {
				t.Errorf("env %v", e)
			}
		}},
		{"GFD GPUs by index", groupSpec{Placement: placement("g", "g/0", "g/1"), Visible: []string{"0", "1"}}, renderOptions{}, func(t *testing.T, c corev1.Container, _ corev1.PodSpec) {
			if e := envOf(c); e["NVIDIA_VISIBLE_DEVICES"] != "0,1" || e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=4096M,1=4096M" {
				t.Errorf("env %v", e)
			}
		}},
		{"writable root: no /tmp volume, no secrets volume", groupSpec{Placement: placement("a", "GPU-a0")}, renderOptions{}, func(t *testing.T, c corev1.Container, pod corev1.PodSpec) {
			if len(pod.Volumes) != 1 || pod.Volumes[0].Name != "mps-pipe" || *c.SecurityContext.ReadOnlyRootFilesystem {
				t.Errorf("volumes %+v", pod.Volumes)
			}
		}},
		{"no pull policy: Kubernetes' default", groupSpec{Placement: placement("a", "GPU-a0")}, renderOptions{}, func(t *testing.T, c corev1.Container, _ corev1.PodSpec) {
			if c.ImagePullPolicy != "" {
				t.Errorf("imagePullPolicy %q, want none", c.ImagePullPolicy)
			}
		}},
		{"pull policy", groupSpec{Placement: placement("a", "GPU-a0")}, renderOptions{ImagePullPolicy: "IfNotPresent"}, func(t *testing.T, c corev1.Container, _ corev1.PodSpec) {
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("imagePullPolicy %q, want IfNotPresent", c.ImagePullPolicy)
			}
		}},
		{"runtime class, port, pipe dir", groupSpec{Placement: placement("a", "GPU-a0")}, renderOptions{RuntimeClass: "nvidia", Port: 9000, MPSPipeDir: "/run/mps"}, func(t *testing.T, c corev1.Container, pod corev1.PodSpec) {
			if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" || c.Ports[0].ContainerPort != 9000 || c.ReadinessProbe.HTTPGet.Port.IntValue() != 9000 ||
				envOf(c)["CUDA_MPS_PIPE_DIRECTORY"] != "/run/mps" || pod.Volumes[0].HostPath.Path != "/run/mps" {
				t.Errorf("pod %+v", pod)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.g.Function, tt.g.Name, tt.g.Config, tt.g.Replicas, tt.g.Model = f, "f-1", cfg, 2, "m"
			d := renderDeployment(tt.g, tt.o)
			if d.Spec.Template.Labels[LabelFunction] != "f" || d.Spec.Template.Labels["team"] != "x" || d.Spec.Selector.MatchLabels[LabelGroup] != "f-1" {
				t.Errorf("labels %v selector %v", d.Spec.Template.Labels, d.Spec.Selector)
			}
			if d.Spec.Template.Spec.Containers[0].Resources.Limits != nil {
				t.Errorf("limits without any asked: %v", d.Spec.Template.Spec.Containers[0].Resources.Limits)
			}
			tt.check(t, d.Spec.Template.Spec.Containers[0], d.Spec.Template.Spec)
		})
	}
}

func TestRenderIsStable(t *testing.T) {
	f := spec("f", 50, nil)
	g := groupSpec{Function: f, Name: "f-1", Placement: placement("a", "GPU-a0"), Config: scheduler.SliceConfig{SMPercent: 50}, Replicas: 1}
	a, b := renderDeployment(g, renderOptions{}), renderDeployment(g, renderOptions{})
	if a.Annotations[AnnotationSpecHash] != b.Annotations[AnnotationSpecHash] {
		t.Error("the same group renders two hashes: every sync would write it")
	}
	g.Replicas = 3
	if c := renderDeployment(g, renderOptions{}); c.Annotations[AnnotationSpecHash] != a.Annotations[AnnotationSpecHash] {
		t.Error("the replica count is in the hash: scaling would roll the pods")
	}
	f.Deployment.Image = "img:2"
	g.Function = f
	if c := renderDeployment(g, renderOptions{}); c.Annotations[AnnotationSpecHash] == a.Annotations[AnnotationSpecHash] {
		t.Error("a new image keeps the hash: the update would not be written")
	}
}

func TestGroupNames(t *testing.T) {
	c := scheduler.SliceConfig{SMPercent: 50, Batch: 1}
	base := groupName("f", placement("a", "GPU-a0", "GPU-a1"), c)
	if groupName("f", placement("a", "GPU-a1", "GPU-a0"), c) != base {
		t.Error("GPU order changes the name")
	}
	other := placement("a", "GPU-a0", "GPU-a1")
	other.Slice.SMPercent = 60
	for name, got := range map[string]string{
		"another GPU":   groupName("f", placement("a", "GPU-a0"), c),
		"another slice": groupName("f", other, c),
		"another batch": groupName("f", placement("a", "GPU-a0", "GPU-a1"), scheduler.SliceConfig{SMPercent: 50, Batch: 8}),
	} {
		if got == base {
			t.Errorf("%s: same name %s", name, got)
		}
	}
	if !strings.HasPrefix(base, "f-") || len(base) != len("f-")+8 {
		t.Errorf("name %q", base)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, v := range []string{"", "{", `{"placement":{"node":"a","gpus":[],"slice":{"smPercent":10}}}`, `{"placement":{"node":"","gpus":["g"],"slice":{"smPercent":10}}}`} {
		if _, err := decodePlacement(v); err == nil {
			t.Errorf("placement %q accepted", v)
		}
	}
	good, err := renderRecord(spec("f", 10, nil), 2, 8080)
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*corev1.Service){
		"no function":  func(s *corev1.Service) { delete(s.Annotations, AnnotationFunction) },
		"bad JSON":     func(s *corev1.Service) { s.Annotations[AnnotationFunction] = "{" },
		"bad replicas": func(s *corev1.Service) { s.Annotations[AnnotationReplicas] = "-1" },
		"another name": func(s *corev1.Service) {
			s.ObjectMeta = metav1.ObjectMeta{Name: "g", Namespace: "ns", Annotations: s.Annotations}
		},
	} {
		s := good.DeepCopy()
		mutate(s)
		if _, _, err := decodeRecord(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	fn, n, err := decodeRecord(good)
	if err != nil || n != 2 || fn.Name() != "f" || fn.GPU.SMPercent != 10 {
		t.Errorf("round trip: %+v %d %v", fn, n, err)
	}
}

// Every function name the API accepts (an RFC 1123 label: up to 63
// characters) must give objects Kubernetes accepts: the group name is a
// label value and a Deployment name, and a second group of one placement
// gets a suffix on top.
func TestLongFunctionNamesFitKubernetes(t *testing.T) {
	c := scheduler.SliceConfig{SMPercent: 50, Batch: 1}
	p := placement("a", "GPU-a0")
	for _, n := range []int{1, 54, 55, 63} {
		name := strings.Repeat("a", n-1) + "b"
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			for _, i := range []int{1, 2, 12} {
				g := groupNameN(name, p, c, i)
				if errs := validation.IsValidLabelValue(g); len(errs) > 0 {
					t.Errorf("group %d: %q is no label value: %v", i, g, errs)
				}
				if errs := validation.IsDNS1123Subdomain(g); len(errs) > 0 {
					t.Errorf("group %d: %q is no Deployment name: %v", i, g, errs)
				}
				if g != groupNameN(name, p, c, i) {
					t.Errorf("group %d: the name is not deterministic", i)
				}
			}
			if groupNameN(name, p, c, 1) == groupNameN(name, p, c, 2) {
				t.Error("the second group of a placement has the first one's name")
			}
			d := renderDeployment(groupSpec{Function: spec(name, 50, nil), Name: groupName(name, p, c), Placement: p, Config: c, Replicas: 1}, renderOptions{})
			for what, ls := range map[string]map[string]string{"deployment": d.Labels, "pod": d.Spec.Template.Labels, "selector": d.Spec.Selector.MatchLabels} {
				for k, v := range ls {
					if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
						t.Errorf("%s label %s=%q: %v", what, k, v, errs)
					}
				}
			}
			for _, ct := range d.Spec.Template.Spec.Containers {
				if errs := validation.IsDNS1123Label(ct.Name); len(errs) > 0 {
					t.Errorf("container name %q: %v", ct.Name, errs)
				}
			}
		})
	}
	// Names that always fitted keep their old form: an upgraded provider
	// finds its Deployments again.
	short := strings.Repeat("s", 54)
	h := groupName("x", p, c)[len("x"):]
	if got := groupName(short, p, c); got != short+h {
		t.Errorf("a 54-character name's group is %q, want %q", got, short+h)
	}
	// Two long names with one 54-character prefix do not share groups.
	long1, long2 := strings.Repeat("l", 60)+"one", strings.Repeat("l", 60)+"two"
	if groupName(long1, p, c) == groupName(long2, p, c) {
		t.Errorf("two long names share the group %q", groupName(long1, p, c))
	}
}

// A replica's environment on Kubernetes is the one every backend renders
// (issue 10): CUDA_VISIBLE_DEVICES numbers the pod's GPUs from 0 (it was
// missing), and a function's own FAAS_GPU_BATCH wins over the plan's (it
// lost on Kubernetes while it won in local mode).
func TestReplicaEnvIsTheSameAsLocalMode(t *testing.T) {
	cfg := scheduler.SliceConfig{SMPercent: 50, Batch: 4}
	tests := []struct {
		name string
		own  map[string]string
		gpus []string
		want map[string]string
	}{
		{"one GPU, the plan's batch", nil, []string{"GPU-a0"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "GPU-a0", "FAAS_GPU_BATCH": "4", "FAAS_GPU_REPLICA_GROUP": "f-1"}},
		{"two GPUs", nil, []string{"GPU-a0", "GPU-a1"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_VISIBLE_DEVICES": "GPU-a0,GPU-a1"}},
		{"the function's own batch wins", map[string]string{"FAAS_GPU_BATCH": "1"}, []string{"GPU-a0"},
			map[string]string{"FAAS_GPU_BATCH": "1"}},
		{"the placement wins over the function's devices", map[string]string{"CUDA_VISIBLE_DEVICES": "3"}, []string{"GPU-a0"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := spec("f", 50, nil)
			f.Deployment.EnvVars = tt.own
			g := groupSpec{Function: f, Name: "f-1", Model: "m", Placement: placement("a", tt.gpus...), Config: cfg, Replicas: 1}
			e := envOf(renderDeployment(g, renderOptions{}).Spec.Template.Spec.Containers[0])
			for k, v := range tt.want {
				if e[k] != v {
					t.Errorf("%s=%q, want %q (env %v)", k, e[k], v, e)
				}
			}
		})
	}
}
