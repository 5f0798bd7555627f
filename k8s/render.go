package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A warm replica's pod is kept out of routing by LabelWarm; its deletion
// cost makes the ReplicaSet controller pick it first when its Deployment
// shrinks (its replica evicted or expired), not a pod in service.
const (
	LabelWarm = "gpu.faas-gpu.dev/warm"
	// annotationDeletionCost is the ReplicaSet controller's
	// controller.kubernetes.io/pod-deletion-cost: the lowest goes first.
	annotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
	warmDeletionCost       = "-1000"
)

// warmPatch is the merge patch that takes a pod out of routing (warm) or
// puts it back: null removes the label and annotation.
func warmPatch(warm bool) []byte {
	if warm {
		return []byte(`{"metadata":{"labels":{"` + LabelWarm + `":"true"},"annotations":{"` + annotationDeletionCost + `":"` + warmDeletionCost + `"}}}`)
	}
	return []byte(`{"metadata":{"labels":{"` + LabelWarm + `":null},"annotations":{"` + annotationDeletionCost + `":null}}}`)
}

// podWarm: a pod kept for a warm replica, out of routing.
func podWarm(p *corev1.Pod) bool { return p.Labels[LabelWarm] == "true" }

// groupSpec is everything a group's Deployment is rendered from.
type groupSpec struct {
	Function  scheduler.Function
	Model     string
	Name      string
	Placement scheduler.Placement
	// Visible is what NVIDIA_VISIBLE_DEVICES names: the GPUs' UUIDs, or
	// their indexes on nodes described only by GPU Feature Discovery.
	Visible  []string
	Config   scheduler.SliceConfig
	Replicas int
}

// renderOptions are the cluster-wide settings of function pods.
type renderOptions struct {
	MPSPipeDir   string
	RuntimeClass string
	// ImagePullPolicy of the function's container; empty: Kubernetes'.
	ImagePullPolicy corev1.PullPolicy
	Port            int
	// ModelStore is the node model store's host folder; empty: none.
	ModelStore string
}

// renderDeployment is the Deployment running one group of a function's
// replicas: pinned to the group's node, told its GPU and slice through the
// environment, talking to the node's MPS control daemon through the host's
// IPC namespace and pipe folder. It does not ask the device plugin for
// nvidia.com/gpu: the GPU is held by a placeholder pod (reservations.go)
// and shared through MPS.
func renderDeployment(g groupSpec, o renderOptions) *appsv1.Deployment {
	dep := g.Function.Deployment
	sel := map[string]string{LabelFunction: dep.Service, LabelGroup: g.Name}
	podLabels := map[string]string{}
	if dep.Labels != nil {
		for k, v := range *dep.Labels {
			podLabels[k] = v
		}
	}
	podLabels[LabelFunction] = dep.Service
	podLabels[LabelGroup] = g.Name
	podLabels[LabelManagedBy] = managedBy

	place := placementAnnotations(g.Placement, g.Config)
	podAnn := map[string]string{"prometheus.io.scrape": "false"}
	if dep.Annotations != nil {
		for k, v := range *dep.Annotations {
			podAnn[k] = v
		}
	}
	for k, v := range place {
		podAnn[k] = v
	}
	podAnn[AnnotationModel] = g.Model

	port := o.Port
	if port <= 0 {
		port = 8080
	}
	probe := func(initial, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/_/health", Port: intstr.FromInt32(int32(port)), Scheme: corev1.URISchemeHTTP,
			}},
			InitialDelaySeconds: initial, PeriodSeconds: period, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: failures,
		}
	}
	container := corev1.Container{
		Name:            dep.Service,
		Image:           dep.Image,
		ImagePullPolicy: o.ImagePullPolicy,
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port), Protocol: corev1.ProtocolTCP}},
		Env:             functionEnv(g, o.MPSPipeDir, o.ModelStore),
		// Readiness gates traffic from the first second; liveness waits
		// longer because loading a model onto a GPU can take many seconds.
		ReadinessProbe: probe(2, 2, 3),
		LivenessProbe:  probe(30, 10, 3),
		Resources:      resourcesOf(dep),
		SecurityContext: &corev1.SecurityContext{
			ReadOnlyRootFilesystem:   &dep.ReadOnlyRootFilesystem,
			AllowPrivilegeEscalation: ptr(false),
		},
	}
	var volumes []corev1.Volume
	if dep.ReadOnlyRootFilesystem {
		// The watchdog writes its lock file and temporary files in /tmp.
		volumes = append(volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
	}
	pipe := o.MPSPipeDir
	if pipe == "" {
		pipe = "/tmp/nvidia-mps"
	}
	volumes = append(volumes, corev1.Volume{Name: "mps-pipe", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: pipe, Type: ptr(corev1.HostPathDirectoryOrCreate),
	}}})
	container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: "mps-pipe", MountPath: pipe})
	if o.ModelStore != "" {
		// Read-only: the store is the node's, filled by the chart's fetch
		// Job; a replica writing there would change what the agent reports
		// for every function on the node. DirectoryOrCreate so a node whose
		// store is still empty runs its replicas (they load from elsewhere).
		volumes = append(volumes, corev1.Volume{Name: "model-store", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: o.ModelStore, Type: ptr(corev1.HostPathDirectoryOrCreate),
		}}})
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: "model-store", MountPath: o.ModelStore, ReadOnly: true})
	}
	if len(dep.Secrets) > 0 {
		var sources []corev1.VolumeProjection
		for _, s := range dep.Secrets {
			sources = append(sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: s}}})
		}
		volumes = append(volumes, corev1.Volume{Name: "secrets", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}})
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: "secrets", MountPath: secretsMountPath, ReadOnly: true})
	}

	pod := corev1.PodSpec{
		Containers: []corev1.Container{container},
		Volumes:    volumes,
		// MPS clients reach the control daemon over shared memory.
		HostIPC:                      true,
		Affinity:                     pinTo(g.Placement.Node),
		Tolerations:                  gpuTolerations(),
		EnableServiceLinks:           ptr(false),
		AutomountServiceAccountToken: ptr(false),
	}
	if o.RuntimeClass != "" {
		pod.RuntimeClassName = ptr(o.RuntimeClass)
	}
	d := &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        g.Name,
			Namespace:   dep.Namespace,
			Labels:      map[string]string{LabelFunction: dep.Service, LabelGroup: g.Name, LabelManagedBy: managedBy},
			Annotations: place,
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(g.Replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			// A GPU slice has no room for a surge: old pods go before new ones.
			Strategy:             appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			RevisionHistoryLimit: ptr(int32(2)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnn},
				Spec:       pod,
			},
		},
	}
	d.Annotations[AnnotationSpecHash] = specHash(d.Labels, d.Annotations, d.Spec.Template)
	return d
}

// functionEnv is a group's replica environment, as in every backend
// (lifecycle.RenderEnv): inside the pod the NVIDIA runtime shows only the
// group's GPUs, numbered from 0.
func functionEnv(g groupSpec, pipeDir, modelDir string) []corev1.EnvVar {
	vars := lifecycle.RenderEnv(lifecycle.EnvInput{
		Spec: g.Function, Model: g.Model, Config: g.Config, Placement: g.Placement,
		Devices: g.Visible, InContainer: true, MPSPipeDir: pipeDir, ModelDir: modelDir, Group: g.Name,
	})
	env := make([]corev1.EnvVar, len(vars))
	for i, v := range vars {
		env[i] = corev1.EnvVar{Name: v.Name, Value: v.Value}
	}
	return env
}

// resourcesOf is the function's CPU and memory requests and limits. The
// handlers validated the quantities. GPUs are not among them: see
// renderDeployment.
func resourcesOf(dep types.FunctionDeployment) corev1.ResourceRequirements {
	list := func(r *types.FunctionResources) corev1.ResourceList {
		if r == nil {
			return nil
		}
		out := corev1.ResourceList{}
		if q, err := resource.ParseQuantity(r.CPU); r.CPU != "" && err == nil {
			out[corev1.ResourceCPU] = q
		}
		if q, err := resource.ParseQuantity(r.Memory); r.Memory != "" && err == nil {
			out[corev1.ResourceMemory] = q
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return corev1.ResourceRequirements{Limits: list(dep.Limits), Requests: list(dep.Requests)}
}

// pinTo requires the pod's node by name. Node affinity rather than
// nodeName: the scheduler still binds the pod, so CPU, memory and taints
// are checked as for any pod.
func pinTo(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
}

// gpuTolerations let pods onto GPU nodes tainted the way NVIDIA's GPU
// operator and the cloud providers taint them.
func gpuTolerations() []corev1.Toleration {
	return []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
}

// renderRecord is the function's Service: a ClusterIP for the function's
// ready pods, as faas-netes makes (in-cluster callers reach
// <fn>.<namespace>:8080), and the durable record of the function as
// deployed and of its desired replica count.
func renderRecord(fn scheduler.Function, desired int, port int) (*corev1.Service, error) {
	spec, err := json.Marshal(fn)
	if err != nil {
		return nil, fmt.Errorf("encode function %s: %w", fn.Name(), err)
	}
	if port <= 0 {
		port = 8080
	}
	ann := map[string]string{AnnotationFunction: string(spec), AnnotationReplicas: strconv.Itoa(desired)}
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fn.Name(), Namespace: fn.Namespace(),
			Labels:      map[string]string{LabelFunction: fn.Name(), LabelManagedBy: managedBy},
			Annotations: ann,
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{LabelFunction: fn.Name(), LabelManagedBy: managedBy},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(int32(port)), Protocol: corev1.ProtocolTCP}},
		},
	}
	svc.Annotations[AnnotationSpecHash] = specHash(svc.Labels, svc.Annotations, svc.Spec)
	return svc, nil
}

// decodeRecord reads a function's record back.
func decodeRecord(svc *corev1.Service) (scheduler.Function, int, error) {
	var fn scheduler.Function
	v, ok := svc.Annotations[AnnotationFunction]
	if !ok {
		return fn, 0, fmt.Errorf("service %s/%s: no %s annotation", svc.Namespace, svc.Name, AnnotationFunction)
	}
	if err := json.Unmarshal([]byte(v), &fn); err != nil {
		return fn, 0, fmt.Errorf("service %s/%s: annotation %s: %w", svc.Namespace, svc.Name, AnnotationFunction, err)
	}
	if fn.Name() != svc.Name || fn.Namespace() != svc.Namespace {
		return fn, 0, fmt.Errorf("service %s/%s: records function %s.%s", svc.Namespace, svc.Name, fn.Name(), fn.Namespace())
	}
	n, err := strconv.Atoi(svc.Annotations[AnnotationReplicas])
	if err != nil || n < 0 {
		return fn, 0, fmt.Errorf("service %s/%s: annotation %s=%q is not a count", svc.Namespace, svc.Name, AnnotationReplicas, svc.Annotations[AnnotationReplicas])
	}
	return fn, n, nil
}

// renderReservation is the placeholder pod that holds one GPU against the
// NVIDIA device plugin while faas-gpu has replicas on it: it asks for
// nvidia.com/gpu: 1 on the GPU's node, so the scheduler and the device
// plugin count the GPU as taken and give it to no other pod.
func renderReservation(ns, node, gpuUUID, image string) *corev1.Pod {
	gpuRes := corev1.ResourceName("nvidia.com/gpu")
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: reservationName(gpuUUID), Namespace: ns,
			Labels:      map[string]string{LabelReservation: gpuKey(gpuUUID), LabelManagedBy: managedBy},
			Annotations: map[string]string{AnnotationGPUs: gpuUUID, AnnotationNode: node},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "reserve", Image: image,
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{gpuRes: resource.MustParse("1")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("8Mi")},
				},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
			}},
			Affinity:                      pinTo(node),
			Tolerations:                   gpuTolerations(),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			EnableServiceLinks:            ptr(false),
			AutomountServiceAccountToken:  ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(1)),
		},
	}
	return p
}

// specHash fingerprints what faas-gpu rendered, so an object already as
// rendered is not written again.
func specHash(parts ...any) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, p := range parts {
		_ = enc.Encode(p) // maps are encoded with sorted keys
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

func ptr[T any](v T) *T { return &v }
