package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faas-gpu/faas-gpu/internal/parking"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Parked pods (docs/kubernetes.md, "Parked pods"): each parked process the
// core keeps (lifecycle/parked.go) is a bare Pod of its function, pinned
// to the process's node, started with parking.StartEnv and the GPUs
// faas-gpu holds on the node visible, or all of them (Options.ParkedSees;
// a container's devices are fixed at its creation), out of every function
// selector. A replica that takes one
// hands it its settings (POST /_/gpu) and adopts it into its placement's
// group: the pod gets the group's labels without pod-template-hash, so no
// ReplicaSet adopts or deletes it, and the placement's annotations, its
// record for a restart. A group's Deployment runs its size less the pods
// it adopted (adoptedPodsLocked, planParkedLocked).

const (
	// LabelParked, the function's name, marks a parked pod.
	LabelParked = "gpu.faas-gpu.dev/parked"
	// LabelAdopted, "true", marks a parked pod a replica took: one of its
	// group's pods that the group's Deployment does not own.
	LabelAdopted = "gpu.faas-gpu.dev/adopted"
	// AnnotationParkedID is the core's ID of a parked pod's process.
	AnnotationParkedID = "gpu.faas-gpu.dev/parked-id"
	// AnnotationAdoptedRestarts is the container's restart count when the
	// pod was adopted: a restart after it starts the container parked
	// again (its spec says so), so the pod is replaced.
	AnnotationAdoptedRestarts = "gpu.faas-gpu.dev/adopted-restarts"
)

// parkedPodName is the pod of parked process id ("<function>#<hex>").
func parkedPodName(id string) string {
	fn, suffix, _ := strings.Cut(id, "#")
	return fn + "-parked-" + suffix
}

// handOver is a replica taking a parked pod: recorded at its Start, begun
// by the writer, done once the pod is adopted; dropped once the informer
// shows the pod adopted, or it is gone.
type handOver struct {
	fn, pod, group string
	// warm: a standby's (Start with Warm), out of routing from its
	// adoption, tied to the standby once done.
	warm        bool
	begun, done bool
}

// renderParkedPod is the pod of parked process id of fn on node: the
// function's pod as its groups' Deployments render it, with the parked
// environment, visible the node's GPUs faas-gpu holds, or "all"
// (Options.ParkedSees; NVIDIA's "none" when it holds none: such a pod is
// never handed a replica), no
// liveness probe (a parked server may answer 503 until its hand-over), and
// none of a group's labels or placement.
func renderParkedPod(fn scheduler.Function, id, node string, visible []string, owner *corev1.Service, o renderOptions) *corev1.Pod {
	d := renderDeployment(groupSpec{Function: fn, Placement: scheduler.Placement{Node: node}}, o)
	tmpl := d.Spec.Template
	labels := map[string]string{}
	for k, v := range tmpl.Labels {
		if k != LabelFunction && k != LabelGroup {
			labels[k] = v
		}
	}
	labels[LabelParked] = fn.Name()
	ann := map[string]string{}
	place := placementAnnotations(scheduler.Placement{}, scheduler.SliceConfig{})
	for k, v := range tmpl.Annotations {
		if _, placed := place[k]; !placed && k != AnnotationModel {
			ann[k] = v
		}
	}
	ann[AnnotationParkedID] = id
	spec := tmpl.Spec
	c := &spec.Containers[0]
	c.LivenessProbe = nil
	dev := strings.Join(visible, ",")
	if dev == "" {
		dev = "none"
	}
	pipe := o.MPSPipeDir
	if pipe == "" {
		pipe = lifecycle.DefaultMPSPipeDir
	}
	c.Env = nil
	for _, e := range parking.StartEnv(fn) {
		c.Env = append(c.Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: dev},
		corev1.EnvVar{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "compute,utility"},
		corev1.EnvVar{Name: "CUDA_MPS_PIPE_DIRECTORY", Value: pipe})
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: parkedPodName(id), Namespace: fn.Namespace(), Labels: labels, Annotations: ann},
		Spec:       spec,
	}
	if owner != nil {
		// Deleting the function collects its parked and adopted pods.
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: owner.Name, UID: owner.UID}}
	}
	return pod
}

// podVisible is what a pod's container sees of the GPUs
// (NVIDIA_VISIBLE_DEVICES).
func podVisible(p *corev1.Pod) []string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == "NVIDIA_VISIBLE_DEVICES" && e.Value != "" && e.Value != "none" {
			return strings.Split(e.Value, ",")
		}
	}
	return nil
}

// canHandOver says whether parked pod p can become a replica on devices
// (the placement's, as state.visibleDevices names them): it runs, and sees
// them (podSees). The core hands a parked process only GPUs in the sight
// its pod reported (parkedSight); this guards a device renamed since.
func canHandOver(p *corev1.Pod, devices []string) bool {
	if p == nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	return podSees(p, devices)
}

// podSees says whether pod p's container sees each of devices (or every
// GPU: ParkedSeesAll), by UUID, which is how a hand-over names them in
// CUDA_VISIBLE_DEVICES (GPU Feature Discovery's made-up UUIDs are names
// CUDA does not know).
func podSees(p *corev1.Pod, devices []string) bool {
	seen := podVisible(p)
	all := slices.Contains(seen, ParkedSeesAll)
	for _, d := range devices {
		if !strings.HasPrefix(d, "GPU-") && !strings.HasPrefix(d, "MIG-") || !all && !slices.Contains(seen, d) {
			return false
		}
	}
	return len(devices) > 0
}

// adoptionPatch makes parked pod p a pod of group on placement pl with
// slice cfg, loading model: the group's labels and the placement's
// annotations, as a pod of its Deployment has them. A standby's (warm) is
// labelled out of routing in the same write, as its warm pod is
// (warmPatch): it holds no SM share, and must take no request.
func adoptionPatch(fnName, group string, pl scheduler.Placement, cfg scheduler.SliceConfig, model string, restarts int32, warm bool) []byte {
	ann := map[string]any{AnnotationModel: model, AnnotationAdoptedRestarts: strconv.Itoa(int(restarts))}
	for k, v := range placementAnnotations(pl, cfg) {
		ann[k] = v
	}
	lbl := map[string]any{LabelFunction: fnName, LabelGroup: group, LabelAdopted: "true", LabelParked: nil}
	if warm {
		lbl[LabelWarm] = "true"
		ann[annotationDeletionCost] = warmDeletionCost
	}
	patch := map[string]any{"metadata": map[string]any{"labels": lbl, "annotations": ann}}
	out, _ := json.Marshal(patch)
	return out
}

// podRestarts is how often p's function container restarted.
func podRestarts(p *corev1.Pod) int32 {
	for _, s := range p.Status.ContainerStatuses {
		return s.RestartCount
	}
	return 0
}

// parkedPlan is what the writer does of function k's parked pods: create
// those the core keeps that are missing, delete those it no longer
// keeps, begin the hand-overs recorded, and delete adopted pods beyond
// their group's size or whose container restarted parked.
type parkedPlan struct {
	create   []*corev1.Pod
	remove   []string
	handOver []handOverJob
}

// handOverJob is one hand-over the writer begins.
type handOverJob struct {
	replica, pod, url string
	settings          map[string]string
	patch             []byte
}

// adoptedPods are the pods of function k counted as adopted into each of
// its groups: those the informer shows adopted (not terminating, not an
// evicted warm replica's) and those being handed over. Called under b.mu.
func (b *Backend) adoptedPodsLocked(st *state, k string) map[string][]*corev1.Pod {
	ns, name := splitKey(k)
	out := map[string][]*corev1.Pod{}
	seen := map[string]bool{}
	for _, p := range b.functionPods(ns, name) {
		if p.Labels[LabelAdopted] != "true" || p.DeletionTimestamp != nil || podFinished(p) {
			continue
		}
		if _, evicted := st.evictions[fnKey(ns, p.Name)]; evicted {
			continue
		}
		g := p.Labels[LabelGroup]
		out[g] = append(out[g], p)
		seen[p.Name] = true
	}
	for _, id := range sortedKeys(st.handOvers) {
		h := st.handOvers[id]
		if h.fn != k || seen[h.pod] {
			continue
		}
		// Not adopted yet, as the informer shows it: counted, so that its
		// group's Deployment does not start a pod for the same replica.
		out[h.group] = append(out[h.group], &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: h.pod, Namespace: ns}})
	}
	return out
}

// planParkedLocked is function k's parkedPlan; groups are its groups as
// the core sizes them. It lowers each group's Replicas by the pods adopted
// into it. Called under b.mu.
func (b *Backend) planParkedLocked(st *state, k string, groups []groupSpec, o renderOptions) parkedPlan {
	var plan parkedPlan
	ns, name := splitKey(k)
	// Hand-overs first: one that cannot begin is dropped here, and its
	// replica's pod is then counted in its group's Deployment below.
	v, exists := st.core.Function(k)
	held := b.heldGPUsLocked(st)
	handing := map[string]bool{}
	for _, id := range sortedKeys(st.handOvers) {
		h := st.handOvers[id]
		if h.fn != k {
			continue
		}
		pod, err := b.pods.in(ns).Pods(ns).Get(h.pod)
		if h.done && err == nil && pod.Labels[LabelAdopted] == "true" {
			delete(st.handOvers, id) // the informer counts it from now on
			continue
		}
		handing[h.pod] = true
		if h.begun {
			continue
		}
		r, ok := st.core.Replica(id)
		if !ok || r.Placement == nil || err != nil || !exists {
			delete(st.handOvers, id) // its replica starts a pod of its own
			continue
		}
		if heldFor(held, r.Placement.GPUs, fnKey(ns, h.group)) {
			continue // begun once the evicted warm pod there is gone
		}
		devices := st.visibleDevices(*r.Placement)
		if !canHandOver(pod, devices) {
			b.log.Info("parked pod cannot take the replica's GPU: the replica starts its own pod", zap.String("namespace", ns), zap.String("pod", h.pod),
				zap.String("replica", id), zap.Strings("gpus", devices))
			delete(st.handOvers, id)
			continue
		}
		h.begun = true
		settings := parking.Settings(lifecycle.RenderEnv(lifecycle.EnvInput{Spec: v.Spec, Model: v.Plan.Request.Model, Config: r.Config, Placement: *r.Placement,
			Devices: devices, MPSPipeDir: o.MPSPipeDir, ModelDir: o.ModelStore, Replica: id, Group: h.group}))
		plan.handOver = append(plan.handOver, handOverJob{replica: id, pod: h.pod,
			url:      "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(o.Port)),
			settings: settings,
			patch:    adoptionPatch(name, h.group, *r.Placement, r.Config, v.Plan.Request.Model, podRestarts(pod), h.warm),
		})
	}

	adopted := b.adoptedPodsLocked(st, k)
	size := map[string]int{}
	for i := range groups {
		g := &groups[i]
		size[g.Name] = g.Replicas
		g.Replicas = max(0, g.Replicas-len(adopted[g.Name]))
	}
	tied := map[string]bool{}
	for _, pod := range st.warmPod {
		tied[pod] = true
	}
	for _, g := range sortedKeys(adopted) {
		pods := adopted[g]
		keep := make([]*corev1.Pod, 0, len(pods))
		for _, p := range pods {
			if p.Status.Phase == "" {
				keep = append(keep, p) // being handed over
				continue
			}
			if want, err := strconv.Atoi(p.Annotations[AnnotationAdoptedRestarts]); err == nil && podRestarts(p) > int32(want) {
				b.log.Warn("adopted pod's container restarted, parked by its spec: replaced", zap.String("namespace", ns), zap.String("pod", p.Name))
				plan.remove = append(plan.remove, p.Name)
				continue
			}
			keep = append(keep, p)
		}
		// Beyond the group's size: the untied, newest first.
		sort.SliceStable(keep, func(i, j int) bool {
			if tied[keep[i].Name] != tied[keep[j].Name] {
				return tied[keep[i].Name]
			}
			return keep[i].CreationTimestamp.Before(&keep[j].CreationTimestamp)
		})
		for _, p := range keep[min(len(keep), size[g]):] {
			if p.Status.Phase != "" {
				plan.remove = append(plan.remove, p.Name)
			}
		}
	}

	want := map[string]bool{}
	var owner *corev1.Service
	if exists {
		owner, _ = b.svcs.in(ns).Services(ns).Get(name)
	}
	for _, p := range st.core.ParkedProcesses(k) {
		pod := parkedPodName(p.ID)
		want[pod] = true
		if owner == nil {
			continue // created once the function's record is seen
		}
		if _, err := b.pods.in(ns).Pods(ns).Get(pod); err == nil || st.parkedSeen[p.ID] {
			continue
		}
		visible := st.nodeDevices(p.Node)
		if b.cfg.ParkedSees == ParkedSeesAll {
			visible = []string{ParkedSeesAll}
		}
		plan.create = append(plan.create, renderParkedPod(v.Spec, p.ID, p.Node, visible, owner, o))
	}
	parked, _ := b.pods.in(ns).Pods(ns).List(labels.SelectorFromSet(labels.Set{LabelParked: name}))
	for _, p := range parked {
		if !want[p.Name] && !handing[p.Name] && p.DeletionTimestamp == nil {
			plan.remove = append(plan.remove, p.Name)
		}
	}
	return plan
}

// syncParked creates and removes the pods of function k's parkedPlan;
// its hand-overs run on their own (syncFunction begins them), as a
// model's load may take minutes. A parked pod that cannot
// be created fails no write of its function (a change is not undone for
// it): the loop tells the core (checkParkedLocked).
func (b *Backend) syncParked(ctx context.Context, k string, plan parkedPlan) error {
	ns, name := splitKey(k)
	api := b.client.CoreV1().Pods(ns)
	for _, p := range plan.create {
		if _, err := api.Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.log.Warn("parked pod not created", zap.String("function", name), zap.String("namespace", ns), zap.String("pod", p.Name), zap.Error(err))
			b.mu.Lock()
			if b.st != nil {
				b.st.parkFailed[p.Annotations[AnnotationParkedID]] = err
			}
			b.mu.Unlock()
			b.kick()
			continue
		}
		b.log.Info("pod parked", zap.String("function", name), zap.String("namespace", ns), zap.String("pod", p.Name))
	}
	for _, pod := range plan.remove {
		if err := api.Delete(ctx, pod, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s/%s: %w", ns, pod, err)
		}
		b.log.Info("parked or adopted pod removed", zap.String("function", name), zap.String("namespace", ns), zap.String("pod", pod))
	}
	return nil
}

// runHandOver hands a parked pod its replica's settings and adopts it
// into the replica's group. One that fails, or whose replica went
// meanwhile, deletes the pod: the replica, if it is still there, then
// starts a pod of its group's Deployment. st is the leadership term's
// state that planned it.
func (b *Backend) runHandOver(st *state, k string, job handOverJob) {
	ns, name := splitKey(k)
	ctx, cancel := context.WithTimeout(b.ctx, parking.HandOverTimeout)
	defer cancel()
	err := parking.HandOver(ctx, &http.Client{}, job.url, job.settings)
	done, werr := b.beginWrite()
	if werr != nil {
		return // no longer leading: the next leader removes the pod
	}
	defer done()
	b.mu.Lock()
	h := st.handOvers[job.replica]
	current := b.st == st && h != nil && h.pod == job.pod
	b.mu.Unlock()
	api := b.client.CoreV1().Pods(ns)
	if err == nil && current {
		_, err = api.Patch(ctx, job.pod, types.MergePatchType, job.patch, metav1.PatchOptions{})
	}
	b.mu.Lock()
	if err == nil && current {
		h.done = true
		if _, standby := st.warmPod[job.replica]; standby && h.warm {
			st.warmPod[job.replica] = job.pod // its pod, out of routing already
		}
		b.log.Info("parked pod handed over: a replica of its group", zap.String("function", name), zap.String("namespace", ns),
			zap.String("pod", job.pod), zap.String("replica", job.replica), zap.String("gpus", job.settings["CUDA_VISIBLE_DEVICES"]),
			zap.String("smPercent", job.settings["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]))
	} else {
		if current {
			delete(st.handOvers, job.replica)
		}
		if err != nil {
			b.log.Error("parked pod not handed over: the replica starts its own pod", zap.String("function", name), zap.String("namespace", ns),
				zap.String("pod", job.pod), zap.String("replica", job.replica), zap.Error(err))
		}
	}
	if b.st == st {
		b.enqueueLocked(k)
	}
	b.mu.Unlock()
	if err != nil || !current {
		if derr := api.Delete(context.Background(), job.pod, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
			b.log.Warn("parked pod not removed", zap.String("pod", ns+"/"+job.pod), zap.Error(derr))
		}
	}
}

// nodeDevices are the GPUs of node faas-gpu holds placeholders for, as
// NVIDIA_VISIBLE_DEVICES names them: what a parked pod started there sees.
func (s *state) nodeDevices(node string) []string {
	var gpus []string
	for u, n := range s.reservedGPUs() {
		if n == node {
			gpus = append(gpus, u)
		}
	}
	sort.Strings(gpus)
	return s.visibleDevices(scheduler.Placement{Node: node, GPUs: gpus})
}

// checkParkedLocked follows the core's parked processes through their
// pods: one whose pod went, failed, or restarted before it waited for its
// settings is gone (ParkedGone; the last a refusal, ParkedRefused, as
// local mode counts a process that exits first), and one whose pod runs is
// asked GET /_/gpu (probeParked). It returns the functions to write.
// Called by the loop under txMu and b.mu.
func (b *Backend) checkParkedLocked(st *state, now time.Time) map[string]bool {
	dirty := map[string]bool{}
	for _, id := range sortedKeys(st.parkFailed) {
		err := st.parkFailed[id]
		delete(st.parkFailed, id)
		res := st.core.ParkedGone(id, now) // asked again at the next tick
		if apierrors.IsForbidden(err) {
			// Not allowed here (RBAC): no use asking again each tick.
			res = st.core.ParkedRefused(id, "its pod cannot be created: "+err.Error(), now)
		}
		for f := range st.apply(res, 0, now) {
			dirty[f] = true
		}
	}
	for _, v := range st.core.Functions() {
		ns, _ := splitKey(v.Key)
		for _, p := range st.core.ParkedProcesses(v.Key) {
			pod, err := b.pods.in(ns).Pods(ns).Get(parkedPodName(p.ID))
			if err != nil {
				if st.parkedSeen[p.ID] {
					delete(st.parkedSeen, p.ID)
					for f := range st.apply(st.core.ParkedGone(p.ID, now), 0, now) {
						dirty[f] = true
					}
				} else {
					// Not created yet: the writer creates it (its first
					// write may have come before the function's record
					// was seen, which the pod's owner reference needs).
					dirty[v.Key] = true
				}
				continue
			}
			st.parkedSeen[p.ID] = true
			switch {
			case pod.DeletionTimestamp != nil || podFinished(pod):
				for f := range st.apply(st.core.ParkedGone(p.ID, now), 0, now) {
					dirty[f] = true
				}
			case p.Ready:
			case podRestarts(pod) > 0:
				for f := range st.apply(st.core.ParkedRefused(p.ID, "its container exited before it waited for its GPU settings", now), 0, now) {
					dirty[f] = true
				}
			case pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
				if _, busy := b.parkProbes.LoadOrStore(p.ID, true); !busy {
					go b.probeParked(st, v.Key, p.ID, pod, p.Node, "http://"+net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(b.cfg.FunctionPort)))
				}
			}
		}
	}
	for id := range st.parkedSeen {
		if st.core.ParkedFunction(id) == "" {
			delete(st.parkedSeen, id)
		}
	}
	return dirty
}

// parkedSight is what parked pod p on node can be handed, in the core's
// terms: the node's GPUs whose device, as a hand-over would name it now,
// the pod sees (podSees).
func (s *state) parkedSight(p *corev1.Pod, node string) lifecycle.Sight {
	gpus := []string{}
	for _, d := range s.core.Inventory().Devices() {
		if d.Node == node && podSees(p, s.visibleDevices(scheduler.Placement{Node: node, GPUs: []string{d.UUID}})) {
			gpus = append(gpus, d.UUID)
		}
	}
	return lifecycle.Sight{GPUs: gpus}
}

// probeParked asks parked process id's pod, on node at url, whether it
// waits for its settings, and tells the core what it answered, and what
// the pod can be handed (parkedSight); no answer (still starting) is
// asked again at a later pass.
func (b *Backend) probeParked(st *state, k, id string, pod *corev1.Pod, node, url string) {
	defer b.parkProbes.Delete(id)
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	ready, refused, err := parking.Probe(ctx, &http.Client{}, url)
	if err != nil || !ready && refused == "" {
		return
	}
	b.txMu.Lock()
	defer b.txMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st != st || st.core.ParkedFunction(id) != k {
		return
	}
	now := time.Now()
	res := st.core.ParkedReady(id, st.parkedSight(pod, node), now)
	if !ready {
		if v, ok := st.core.Function(k); ok {
			parking.LogRefusal(b.log, v.Spec, parkedPodName(id), refused)
		}
		res = st.core.ParkedRefused(id, refused, now)
	}
	b.enqueueLocked(sortedKeys(st.apply(res, 0, now))...)
	b.enqueueLocked(k)
}

// canPark is the core's Options.CanPark where -k8s-parked is on: a
// function that asks, or that does not say and whose environment
// declares that its server speaks /_/gpu (its image's cannot be read
// here). Whether it really does shows once one pod is parked.
func canPark(spec scheduler.Function) bool { return parking.Wanted(spec, nil) }
