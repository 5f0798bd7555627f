package k8s

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A deployed function is one Deployment per GPU, pinned to the GPU's
// node, telling its pods their GPU and slice, with the function's env,
// labels, annotations, resources and secrets; its pods become Ready (kwok)
// and the status says so; the GPU is held against the device plugin.
func TestDeployPinsAGroupPerGPU(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "deploy")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	p.must(t, http.StatusAccepted, http.MethodPost, "/system/secrets", types.Secret{Name: "api-key", Value: "s3cret"})
	defer p.must(t, http.StatusAccepted, http.MethodDelete, "/system/secrets", types.Secret{Name: "api-key"})

	// 60 % SM: two replicas cannot share a GPU, so they get one each.
	f := fn("resnet", 60, "4Gi")
	labels := map[string]string{"team": "vision", "com.openfaas.scale.min": "2"}
	f.Labels = &labels
	(*f.Annotations)["example.com/owner"] = "alice"
	f.EnvVars = map[string]string{"MODEL_DIR": "/models", "NVIDIA_VISIBLE_DEVICES": "all"}
	f.EnvProcess = "python handler.py"
	f.Secrets = []string{"api-key"}
	f.Limits = &types.FunctionResources{Memory: "2Gi", CPU: "2"}
	f.Requests = &types.FunctionResources{Memory: "1Gi", CPU: "500m"}
	f.ReadOnlyRootFilesystem = true
	p.deploy(t, f)
	p.ready(t, "resnet", 2, 30*time.Second)

	ctx := context.Background()
	deps, err := env.client.AppsV1().Deployments(fnNS).List(ctx, metav1.ListOptions{LabelSelector: "faas_function=resnet"})
	if err != nil {
		t.Fatal(err)
	}
	if len(deps.Items) != 2 {
		t.Fatalf("%d Deployments, want one per GPU (2)", len(deps.Items))
	}
	gpusSeen := map[string]bool{}
	for _, d := range deps.Items {
		checkDeployment(t, d, gpusSeen)
	}

	// Status and list report what runs.
	st := p.status(t, "resnet")
	if st.Replicas != 2 || st.AvailableReplicas != 2 || st.Image != f.Image || st.EnvProcess != f.EnvProcess || (*st.Labels)["team"] != "vision" ||
		(*st.Annotations)["example.com/owner"] != "alice" || st.Limits == nil || st.Limits.Memory != "2Gi" || len(st.Secrets) != 1 || st.CreatedAt.IsZero() {
		t.Errorf("status = %+v", st)
	}
	var list []types.FunctionStatus
	if err := json.Unmarshal(p.must(t, http.StatusOK, http.MethodGet, "/system/functions", nil), &list); err != nil || len(list) != 1 || list[0].AvailableReplicas != 2 {
		t.Errorf("list = %+v (%v)", list, err)
	}

	// /system/gpus shows both replicas ready, one per GPU.
	rep := p.gpus(t)
	if rep.Source != "kubernetes" || len(rep.Nodes) != 2 {
		t.Fatalf("report: source %q, %d nodes", rep.Source, len(rep.Nodes))
	}
	ready := 0
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if r.Function == "resnet" && r.Ready && r.SMPercent == 60 && gpusSeen[g.UUID] {
					ready++
				}
			}
		}
	}
	if ready != 2 {
		t.Errorf("/system/gpus shows %d ready replicas of resnet on its GPUs, want 2: %+v", ready, rep.Nodes)
	}

	// One placeholder pod per GPU in use, bound by the scheduler to the
	// GPU's node, holding nvidia.com/gpu: 1.
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 2 }); err != nil {
		t.Fatalf("placeholders: %d, want 2", len(reservations(t)))
	}
	for _, r := range reservations(t) {
		q := r.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		if q.Value() != 1 || !gpusSeen[r.Annotations["gpu.faas-gpu.dev/gpu-uuids"]] {
			t.Errorf("placeholder %s: %v GPUs for %s", r.Name, q.String(), r.Annotations["gpu.faas-gpu.dev/gpu-uuids"])
		}
	}
	// The Service record lets in-cluster callers reach <fn>.<ns>:8080.
	svc, err := env.client.CoreV1().Services(fnNS).Get(ctx, "resnet", metav1.GetOptions{})
	if err != nil || svc.Spec.Selector["faas_function"] != "resnet" || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("service: %+v %v", svc, err)
	}
}

// reservations lists the GPU placeholder pods.
func reservations(t *testing.T) []corev1.Pod {
	t.Helper()
	pods, err := env.client.CoreV1().Pods(providerNS).List(context.Background(), metav1.ListOptions{LabelSelector: "gpu.faas-gpu.dev/reservation"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// checkDeployment checks one group's Deployment of the resnet function.
func checkDeployment(t *testing.T, d appsv1.Deployment, gpusSeen map[string]bool) {
	t.Helper()
	ann := d.Annotations
	node, uuid := ann["gpu.faas-gpu.dev/node"], ann["gpu.faas-gpu.dev/gpu-uuids"]
	if !strings.HasPrefix(uuid, "GPU-"+node+"-") || ann["gpu.faas-gpu.dev/sm-percent"] != "60" || ann["gpu.faas-gpu.dev/memory"] != "4Gi" {
		t.Errorf("%s: placement annotations %v", d.Name, ann)
	}
	if gpusSeen[uuid] {
		t.Errorf("%s: GPU %s already has a group of this function", d.Name, uuid)
	}
	gpusSeen[uuid] = true
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Labels["faas_function"] != "resnet" {
		t.Errorf("%s: replicas %d, strategy %s, labels %v", d.Name, *d.Spec.Replicas, d.Spec.Strategy.Type, d.Labels)
	}
	pod := d.Spec.Template.Spec
	terms := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchFields[0].Key != "metadata.name" || terms[0].MatchFields[0].Values[0] != node {
		t.Errorf("%s: not pinned to %s: %+v", d.Name, node, terms)
	}
	if !pod.HostIPC {
		t.Errorf("%s: no hostIPC, MPS clients cannot reach the daemon", d.Name)
	}
	c := pod.Containers[0]
	envs := map[string]string{}
	for _, e := range c.Env {
		envs[e.Name] = e.Value
	}
	want := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": uuid, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "60", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",
		"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps", "MODEL_DIR": "/models", "fprocess": "python handler.py", "FAAS_GPU_MODEL": "model-resnet",
	}
	for k, v := range want {
		if envs[k] != v {
			t.Errorf("%s: env %s=%q, want %q", d.Name, k, envs[k], v)
		}
	}
	if n := strings.Count(strings.Join(envNames(c.Env), " "), "NVIDIA_VISIBLE_DEVICES"); n != 1 {
		t.Errorf("%s: NVIDIA_VISIBLE_DEVICES set %d times; the placement must win over the function's own", d.Name, n)
	}
	lim, req := c.Resources.Limits, c.Resources.Requests
	if !lim.Memory().Equal(resource.MustParse("2Gi")) || !lim.Cpu().Equal(resource.MustParse("2")) || !req.Cpu().Equal(resource.MustParse("500m")) {
		t.Errorf("%s: resources %+v", d.Name, c.Resources)
	}
	if _, asks := lim["nvidia.com/gpu"]; asks {
		t.Errorf("%s: a function pod must not ask the device plugin for a GPU: the placeholder holds it", d.Name)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts["/var/openfaas/secrets"]; !ok || !m.ReadOnly {
		t.Errorf("%s: no read-only secrets mount: %+v", d.Name, c.VolumeMounts)
	}
	if _, ok := mounts["/tmp"]; !ok {
		t.Errorf("%s: read-only root filesystem without a /tmp volume", d.Name)
	}
	if _, ok := mounts["/tmp/nvidia-mps"]; !ok {
		t.Errorf("%s: no MPS pipe mount", d.Name)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if v := vols["secrets"]; v.Projected == nil || v.Projected.Sources[0].Secret.Name != "api-key" {
		t.Errorf("%s: secrets volume %+v", d.Name, v)
	}
	if v := vols["mps-pipe"]; v.HostPath == nil || v.HostPath.Path != "/tmp/nvidia-mps" {
		t.Errorf("%s: MPS pipe volume %+v", d.Name, v)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem not read-only", d.Name)
	}
	for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/_/health" || pr.HTTPGet.Port.IntValue() != 8080 {
			t.Errorf("%s: %s probe %+v", d.Name, name, pr)
		}
	}
	tl := d.Spec.Template.Labels
	if tl["team"] != "vision" || tl["faas_function"] != "resnet" || d.Spec.Template.Annotations["example.com/owner"] != "alice" {
		t.Errorf("%s: pod labels %v annotations %v", d.Name, tl, d.Spec.Template.Annotations)
	}
}

func envNames(env []corev1.EnvVar) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = e.Name
	}
	return out
}

// -k8s-image-pull-policy reaches every function container the API server
// stores. The image is tagged, so the API server's own default would be
// IfNotPresent: Always can only come from the flag.
func TestImagePullPolicyReachesFunctionPods(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "pull-policy", "-k8s-image-pull-policy", "Always")
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)

	p.deploy(t, fn("pulled", 30, "2Gi"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var policies []corev1.PullPolicy
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		deps, err := env.client.AppsV1().Deployments(fnNS).List(ctx, metav1.ListOptions{LabelSelector: "faas_function=pulled"})
		if err != nil || len(deps.Items) == 0 {
			return false, nil
		}
		policies = policies[:0]
		for _, d := range deps.Items {
			for _, c := range d.Spec.Template.Spec.Containers {
				policies = append(policies, c.ImagePullPolicy)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("no Deployment of the function: %v", err)
	}
	for _, pol := range policies {
		if pol != corev1.PullAlways {
			t.Fatalf("function containers' imagePullPolicy %v, want Always", policies)
		}
	}
}
