package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// usage is SM % and memory summed per GPU UUID.
type usage map[string]struct {
	sm  int
	mem int64
}

func (u usage) add(gpu string, sm int, mem int64) {
	v := u[gpu]
	v.sm += sm
	v.mem += mem
	u[gpu] = v
}

// over reports GPUs given more than 100 % SM or more memory than they have.
func (u usage) over(what string) error {
	caps := capacity()
	var bad []string
	for g, v := range u {
		if v.sm > 100 || v.mem > caps[g] {
			bad = append(bad, fmt.Sprintf("%s: %d%% SM, %d MiB of %d MiB", g, v.sm, v.mem>>20, caps[g]>>20))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%s oversubscribe a GPU: %s", what, strings.Join(bad, "; "))
}

// podUsage is what the function pods that exist now (terminating ones
// included: they still hold their share) were told to use, read from
// their environment: the real load on each GPU.
func podUsage(ctx context.Context) (usage, error) {
	pods, err := env.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "faas_function"})
	if err != nil {
		return nil, err
	}
	return usageOf(podPtrs(pods.Items)), nil
}

func podPtrs(pods []corev1.Pod) []*corev1.Pod {
	ptrs := make([]*corev1.Pod, len(pods))
	for i := range pods {
		ptrs[i] = &pods[i]
	}
	return ptrs
}

func usageOf(pods []*corev1.Pod) usage {
	u := usage{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		e := map[string]string{}
		for _, v := range p.Spec.Containers[0].Env {
			e[v.Name] = v.Value
		}
		sm, _ := strconv.Atoi(e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
		if p.Labels[labelWarm] == "true" {
			sm = 0 // a warm replica's pod serves nothing: it keeps memory, not SMs
		}
		if p.Labels[labelAdopted] == "true" {
			// A parked pod handed its settings: its environment is the
			// parked one, its placement the annotation it was adopted with.
			var pa placementAnn
			_ = json.Unmarshal([]byte(p.Annotations["gpu.faas-gpu.dev/placement"]), &pa)
			if sm = pa.Placement.Slice.SMPercent; p.Labels[labelWarm] == "true" {
				sm = 0
			}
			for _, g := range pa.Placement.GPUs {
				u.add(g, sm, pa.Placement.Slice.MemoryBytes)
			}
			continue
		}
		for i, g := range strings.Split(e["NVIDIA_VISIBLE_DEVICES"], ",") {
			u.add(g, sm, memLimit(e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], i))
		}
	}
	return u
}

// describePods lists pods with their GPU, slice and state, for a failure.
func describePods(pods []*corev1.Pod) string {
	var lines []string
	for _, p := range pods {
		e := map[string]string{}
		for _, v := range p.Spec.Containers[0].Env {
			e[v.Name] = v.Value
		}
		state := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			state += ",terminating"
		}
		lines = append(lines, fmt.Sprintf("  %s %s%% %s %s rv=%s", e["NVIDIA_VISIBLE_DEVICES"], e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], p.Name, state, p.ResourceVersion))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// watchPods checks the pods' usage at every pod event the API server
// sends, so no state of the cluster between two polls goes unchecked.
func watchPods(ctx context.Context, report func(error)) error {
	f := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "faas_function"
	}))
	inf := f.Core().V1().Pods()
	lister := inf.Lister()
	check := func() {
		pods, _ := lister.List(labels.Everything())
		if err := usageOf(pods).over("pods (watched)"); err != nil {
			report(fmt.Errorf("%w\n%s", err, describePods(pods)))
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { check() }, UpdateFunc: func(_, _ any) { check() }, DeleteFunc: func(any) { check() },
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return nil
}

// memLimit reads device i's limit from "0=4096M,1=4096M".
func memLimit(v string, i int) int64 {
	for _, part := range strings.Split(v, ",") {
		k, m, _ := strings.Cut(part, "=")
		if k == strconv.Itoa(i) {
			n, _ := strconv.ParseInt(strings.TrimSuffix(m, "M"), 10, 64)
			return n << 20
		}
	}
	return 0
}

type placementAnn struct {
	Placement scheduler.Placement `json:"placement"`
}

// deploymentUsage is replicas x slice of every Deployment, from the
// placement annotations faas-gpu restores from.
func deploymentUsage(ctx context.Context) (usage, error) {
	deps, err := env.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "faas_function"})
	if err != nil {
		return nil, err
	}
	// A Deployment's count includes its warm replicas, whose pods keep
	// memory and no SMs. The pods are read as they were when the
	// Deployments were (the same etcd revision): read later, a
	// Deployment listed before it was scaled to zero had its warm pod
	// already terminating, so not counted as warm, and its count was
	// taken for replicas in service beside the ones that have the SMs.
	warm, err := env.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: labelWarm + "=true",
		ResourceVersion: deps.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		return nil, err
	}
	warmIn := map[string]int32{}
	for _, p := range warm.Items {
		if p.DeletionTimestamp == nil && p.Labels[labelAdopted] != "true" {
			warmIn[p.Namespace+"/"+p.Labels["gpu.faas-gpu.dev/group"]]++
		}
	}
	// Pods adopted from parked ones are their group's beyond what its
	// Deployment counts, at the placement they were adopted with.
	adopted, err := env.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: labelAdopted + "=true",
		ResourceVersion: deps.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		return nil, err
	}
	u := usageOf(podPtrs(adopted.Items))
	for _, d := range deps.Items {
		var p placementAnn
		if err := json.Unmarshal([]byte(d.Annotations["gpu.faas-gpu.dev/placement"]), &p); err != nil {
			return nil, fmt.Errorf("deployment %s: %v", d.Name, err)
		}
		kept := min(warmIn[d.Namespace+"/"+d.Name], *d.Spec.Replicas)
		for _, g := range p.Placement.GPUs {
			for i := range *d.Spec.Replicas {
				sm := p.Placement.Slice.SMPercent
				if i < kept {
					sm = 0
				}
				u.add(g, sm, p.Placement.Slice.MemoryBytes)
			}
		}
	}
	return u, nil
}

// reportUsage checks /system/gpus against itself: each GPU's totals are
// the sum of its replicas.
func reportUsage(rep scheduler.ClusterReport) (usage, error) {
	u := usage{}
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			sm, mem := 0, int64(0)
			for _, r := range g.Replicas {
				rsm := r.SMPercent
				if r.Idle { // a warm replica keeps memory, not SMs
					rsm = 0
				}
				sm += rsm
				mem += r.MemoryBytes
				u.add(g.UUID, rsm, r.MemoryBytes)
			}
			if sm != g.SMAllocated || mem != g.MemoryAllocated {
				return nil, fmt.Errorf("/system/gpus: GPU %s says %d%% / %d bytes, its replicas add up to %d%% / %d", g.UUID, g.SMAllocated, g.MemoryAllocated, sm, mem)
			}
		}
	}
	return u, nil
}

// checkAll checks the three views once.
func checkAll(ctx context.Context, reps ...scheduler.ClusterReport) error {
	pu, err := podUsage(ctx)
	if err != nil {
		return err
	}
	if err := pu.over("pods"); err != nil {
		return err
	}
	du, err := deploymentUsage(ctx)
	if err != nil {
		return err
	}
	if err := du.over("deployments"); err != nil {
		return err
	}
	for _, rep := range reps {
		ru, err := reportUsage(rep)
		if err != nil {
			return err
		}
		if err := ru.over("/system/gpus"); err != nil {
			return err
		}
	}
	return nil
}

// watchInvariants checks, every 50 ms until the test ends, that no GPU is
// oversubscribed by the pods that exist, by the Deployments, or in the
// providers' /system/gpus.
func watchInvariants(t *testing.T, ps ...*provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var first error
	checks := 0
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil && ctx.Err() == nil {
			first = err
		}
	}
	if err := watchPods(ctx, report); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var reps []scheduler.ClusterReport
			for _, p := range ps {
				if rep, ok := p.tryGPUs(); ok {
					reps = append(reps, rep)
				}
			}
			if err := checkAll(ctx, reps...); err != nil {
				report(err)
			}
			mu.Lock()
			checks++
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			t.Errorf("invariant broken: %v", first)
			return
		}
		t.Logf("no GPU oversubscribed at any pod event, nor in %d polls of Deployments and /system/gpus", checks)
	})
}

// tryGPUs is /system/gpus, or false when the provider does not answer.
func (p *provider) tryGPUs() (scheduler.ClusterReport, bool) {
	var rep scheduler.ClusterReport
	resp, err := p.http.Get(p.url + "/system/gpus")
	if err != nil {
		return rep, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&rep) != nil {
		return rep, false
	}
	return rep, true
}

// cleanUp deletes every function through p and waits until nothing of
// them is left in the cluster: no Deployment, pod, Service or GPU
// placeholder.
func cleanUp(t *testing.T, p *provider) {
	t.Helper()
	var list []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(p.must(t, 200, "GET", "/system/functions", nil), &list); err != nil {
		t.Fatal(err)
	}
	for _, f := range list {
		p.remove(t, f.Name)
	}
	nothingLeft(t, 30*time.Second)
}

// nothingLeft waits until faas-gpu has no object left in the cluster.
func nothingLeft(t *testing.T, within time.Duration) {
	t.Helper()
	var left []string
	err := poll(within, func() bool {
		left = left[:0]
		ctx := context.Background()
		sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=faas-gpu"}
		deps, err := env.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, sel)
		if err != nil {
			return false
		}
		for _, d := range deps.Items {
			left = append(left, "deployment "+d.Namespace+"/"+d.Name)
		}
		pods, err := env.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, sel)
		if err != nil {
			return false
		}
		for _, p := range pods.Items {
			left = append(left, "pod "+p.Namespace+"/"+p.Name)
		}
		svcs, err := env.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, sel)
		if err != nil {
			return false
		}
		for _, s := range svcs.Items {
			left = append(left, "service "+s.Namespace+"/"+s.Name)
		}
		rss, err := env.client.AppsV1().ReplicaSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "faas_function"})
		if err != nil {
			return false
		}
		for _, r := range rss.Items {
			left = append(left, "replicaset "+r.Namespace+"/"+r.Name)
		}
		return len(left) == 0
	})
	if err != nil {
		t.Fatalf("left behind after %v: %s", within, strings.Join(left, ", "))
	}
}
