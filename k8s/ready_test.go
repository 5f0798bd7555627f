package k8s

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/faas-gpu/faas-gpu/sim"
	"github.com/faas-gpu/faas-gpu/test/parity"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podCluster is what the kubelet and the controllers do with a state's
// groups, in a pod indexer the backend's listers read (no informer in
// between, so each step sees what the last one made): each group gets as
// many pods as its Deployment asks for, made ready or not (ready), and the
// writer's part is done at once: warm replicas tied to a pod, evicted pods
// deleted.
type podCluster struct {
	t     *testing.T
	b     *Backend
	pods  cache.Indexer
	made  int
	ready func(group string) bool
}

func newPodCluster(t *testing.T, st *state) *podCluster {
	b := fakeBackend(t)
	b.st = st
	idx := emptyIndexer()
	b.pods = multi[corelisters.PodLister]{byNS: map[string]corelisters.PodLister{"": corelisters.NewPodLister(idx)}, empty: corelisters.NewPodLister(emptyIndexer())}
	return &podCluster{t: t, b: b, pods: idx, ready: func(string) bool { return true }}
}

// converge makes the pods match the groups, then does the loop's part as
// reconcile does: drains ended (the pods are gone), demotes confirmed,
// pods ready reported.
func (c *podCluster) converge(now time.Time) {
	c.t.Helper()
	st := c.b.st
	for key := range st.evictions {
		ns, pod := splitKey(key)
		if obj, ok, _ := c.pods.GetByKey(fnKey(ns, pod)); ok {
			_ = c.pods.Delete(obj)
		}
		delete(st.evictions, key)
	}
	want, fnOf := map[string]int{}, map[string]string{}
	for _, v := range st.core.Functions() {
		for _, g := range st.groupSpecs(v.Key) {
			want[g.Name], fnOf[g.Name] = g.Replicas, v.Key
		}
	}
	byGroup := map[string][]*corev1.Pod{}
	for _, o := range c.pods.List() {
		p := o.(*corev1.Pod)
		byGroup[p.Labels[LabelGroup]] = append(byGroup[p.Labels[LabelGroup]], p)
	}
	tied := map[string]bool{}
	for _, pod := range st.warmPod {
		tied[pod] = true
	}
	for group, pods := range byGroup {
		// The ReplicaSet controller removes the cheapest pods: untied,
		// newest first.
		slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(b.Name, a.Name) })
		var kept []*corev1.Pod
		extra := len(pods) - want[group]
		for _, p := range pods {
			if extra > 0 && !tied[p.Name] {
				_ = c.pods.Delete(p)
				extra--
				continue
			}
			kept = append(kept, p)
		}
		byGroup[group] = kept
	}
	for group, n := range want {
		for len(byGroup[group]) < n {
			c.made++
			name := fmt.Sprintf("%s-p%03d", group, c.made)
			ready := time.Duration(-1)
			if c.ready(group) {
				ready = time.Second
			}
			ns, fn := splitKey(fnOf[group])
			p := functionPod(fn, group, name, now, ready)
			p.Namespace = ns
			if err := c.pods.Add(p); err != nil {
				c.t.Fatal(err)
			}
			byGroup[group] = append(byGroup[group], p)
		}
	}
	// The writer ties each warm replica to a ready pod of its group.
	for id, pod := range st.warmPod {
		if pod != "" {
			continue
		}
		group := st.groupOf[id]
		for _, p := range byGroup[group] {
			if !tied[p.Name] && podReady(p) {
				st.warmPod[id], tied[p.Name] = p.Name, true
				break
			}
		}
	}
	st.checkDrains(func(string, string, int) bool { return true }, now)
	st.confirmDemotes(now)
	c.b.mu.Lock()
	st.reportReady(c.b.servingLocked(st), now)
	c.b.mu.Unlock()
}

// setReady makes every pod of group ready.
func (c *podCluster) setReady(group string) {
	for _, o := range c.pods.List() {
		p := o.(*corev1.Pod).DeepCopy()
		if p.Labels[LabelGroup] == group && !podReady(p) {
			p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.2"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			if err := c.pods.Update(p); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// servingPods are the ready pods of fn in routing (not tied to a warm
// replica).
func (c *podCluster) servingPods() int {
	tied := map[string]bool{}
	for _, pod := range c.b.st.warmPod {
		tied[pod] = true
	}
	n := 0
	for _, o := range c.pods.List() {
		if p := o.(*corev1.Pod); podReady(p) && !tied[p.Name] {
			n++
		}
	}
	return n
}

// tickScaled runs one autoscaler pass as state.tick does and returns what
// it scaled.
func tickScaled(st *state, now time.Time, load lifecycle.Load) []lifecycle.Scaled {
	for _, v := range st.core.Functions() {
		st.core.ObserveLoad(v.Key, load)
	}
	res := st.core.Tick(now)
	st.apply(res, 0, now)
	return res.Scaled
}

// liveIDs are function k's replicas in service or starting.
func liveIDs(st *state, k string) []string {
	v, _ := st.core.Function(k)
	var out []string
	for _, r := range v.Live {
		out = append(out, r.ID)
	}
	return out
}

// TestResizeCompletesWhenTheNewPodIsReady: on Kubernetes, a make-before-
// break resize (scheduler.Resize, after the load falls) ends once the
// replacement's pod is ready and not before: the booking paired with that
// pod is told ready to the core, which retires the old replicas; they
// leave routing (tied warm) and drain, their group's pods go. Until then
// the old pods serve. Seen failing before the backend reported readiness:
// no resize ever started (the core waits for its replicas to be ready).
func TestResizeCompletesWhenTheNewPodIsReady(t *testing.T) {
	cat, err := sim.BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	rn := parity.Fn{Name: "rn", Model: "resnet50", SLO: 200 * time.Millisecond, Min: 1, Max: 8}
	// The load falls from 400 to where two of the peak's replicas are
	// left and one cheaper slice serves in their place: a merge. (A fall
	// to 5 req/s leaves one 10 % replica since the pooled capacity model,
	// and no slice undercuts it by the 20 % a resize must save.)
	const peakRate, lowRate = 400, 120
	tests := []struct {
		name string
		// newReady: whether the replacement's pods become ready.
		newReady bool
	}{
		{name: "the new pod turns ready: the old replicas retire and drain", newReady: true},
		{name: "the new pod never turns ready: the old replicas stay and serve", newReady: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(parity.Cluster("node-a", "node-b"), coreOptions(cat.Store, scheduler.DefaultAutoscaleOptions), nil)
			c := newPodCluster(t, st)
			t0 := time.Now().Truncate(time.Second)
			k := fnKey("openfaas-fn", "rn")
			mustDeploy(t, st, rn.Spec(), t0)
			c.converge(t0)
			var load lifecycle.Load
			var resize *lifecycle.Scaled
			var at time.Time
			var before []string // rn's replicas in service before the resize
			peak := 0
			for s := 1; s <= 240 && resize == nil; s++ {
				now := t0.Add(time.Duration(s) * time.Second)
				if s <= 60 {
					load.Requests += peakRate
				} else {
					load.Requests += lowRate
				}
				load.LastRequest = now
				before = liveIDs(st, k)
				for _, sc := range tickScaled(st, now, load) {
					if sc.Resize {
						resize, at = &sc, now
					}
				}
				if resize != nil && !tt.newReady {
					// Pods made from now on (the replacement's) never
					// turn ready.
					c.ready = func(string) bool { return false }
				}
				c.converge(now)
				if c.servingPods() == 0 {
					t.Fatalf("second %d: no pod of rn serves", s)
				}
				v, _ := st.core.Function(k)
				peak = max(peak, len(v.Live))
			}
			if resize == nil {
				v, _ := st.core.Function(k)
				t.Fatalf("no resize after the load fell from %d to %d req/s (%d replicas at the peak, %d now: %s)", peakRate, lowRate, peak, len(v.Live), v.LastScale)
			}
			t.Logf("%d replicas at the peak; at %s: %+v", peak, at.Sub(t0), *resize)
			for s := 1; s <= 5; s++ {
				now := at.Add(time.Duration(s) * time.Second)
				load.Requests += lowRate
				load.LastRequest = now
				tickScaled(st, now, load)
				c.converge(now)
				if c.servingPods() == 0 {
					t.Fatalf("%d s after the resize: no pod of rn serves", s)
				}
			}
			v, _ := st.core.Function(k)
			starting := 0
			for _, r := range v.Live {
				if r.Phase == lifecycle.Starting {
					starting++
				}
			}
			if tt.newReady {
				// The pair counts once: the replicas the resize left.
				if starting != 0 || len(v.Live) != resize.Replicas {
					t.Fatalf("the new pod ready: %d replicas in service (%d starting); want %d, none starting", len(v.Live), starting, resize.Replicas)
				}
				var gone []string
				for _, id := range before {
					if !slices.Contains(liveIDs(st, k), id) {
						if r, ok := st.core.Replica(id); ok {
							t.Fatalf("replaced replica %s still held, %s", id, r.Phase)
						}
						gone = append(gone, id)
					}
				}
				if len(gone) != resize.Removed {
					t.Fatalf("replicas %v gone; want the %d the resize replaced", gone, resize.Removed)
				}
				if pods := len(c.pods.List()); pods != len(v.Live)+len(v.Warm) {
					t.Fatalf("%d pods for %d replicas and %d warm: the old group's pods stayed", pods, len(v.Live), len(v.Warm))
				}
				return
			}
			old := resize.Replicas + resize.Removed - resize.Added
			if starting != 1 || len(v.Live) != old+1 {
				t.Fatalf("the new pod not ready: %d replicas in service (%d starting); want the %d old ones and the starting one", len(v.Live), starting, old)
			}
			if n := c.servingPods(); n != old {
				t.Fatalf("the new pod not ready: %d pods serve; want the %d old ones", n, old)
			}
		})
	}
}

// TestReadyOnceOnItsOwnPod: a replica that joins a group where another
// replica serves is ready only once a pod of its own turns ready, not on
// the pod the other one serves on, whichever of their IDs sorts first; and
// a ready replica whose pairing moves to another pod (its pod replaced) is
// told ready once and stays ready. Seen failing with the bookings paired
// by ID alone (the new one, sorting first, was ready on the old pod).
func TestReadyOnceOnItsOwnPod(t *testing.T) {
	for _, tt := range []struct {
		name     string
		old, new string
	}{
		{name: "the new replica sorts first", old: "f#z", new: "f#a"},
		{name: "the new replica sorts last", old: "f#a", new: "f#z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ids := []string{tt.old, tt.new}
			opts := coreOptions(nil, scheduler.AutoscaleOptions{})
			opts.NewID = func(string) string { id := ids[0]; ids = ids[1:]; return id }
			st := newState(oneGPU(), opts, nil)
			c := newPodCluster(t, st)
			now := time.Now()
			phase := func(id string) lifecycle.Phase {
				v, _ := st.core.Replica(id)
				return v.Phase
			}
			mustDeploy(t, st, specMem("f", 20, "4Gi"), now)
			c.converge(now)
			if p := phase(tt.old); p != lifecycle.Ready {
				t.Fatalf("the first replica, its pod ready: %s", p)
			}
			c.ready = func(string) bool { return false }
			scaleApply(t, st, "f", 2, now)
			if g := st.groupSpecs("ns/f"); len(g) != 1 || g[0].Replicas != 2 {
				t.Fatalf("groups %+v; want one of 2", g)
			}
			c.converge(now)
			c.converge(now)
			if p := phase(tt.new); p != lifecycle.Starting {
				t.Fatalf("the second replica, its pod not ready: %s", p)
			}
			g := st.groupSpecs("ns/f")[0].Name
			c.setReady(g)
			c.converge(now)
			if p, q := phase(tt.new), phase(tt.old); p != lifecycle.Ready || q != lifecycle.Ready {
				t.Fatalf("both pods ready: %s %s", p, q)
			}
			// The older pod goes (its node's kubelet restarted it): the
			// pairing moves, nobody is told ready again or loses it.
			first := c.pods.List()[0].(*corev1.Pod)
			for _, o := range c.pods.List() {
				if p := o.(*corev1.Pod); p.Name < first.Name {
					first = p
				}
			}
			_ = c.pods.Delete(first)
			c.converge(now)
			if res := st.core.ReplicaReady(tt.old, now); len(res.Effects) != 0 {
				t.Fatalf("told ready again: %v", res.Effects)
			}
			if p, q := phase(tt.new), phase(tt.old); p != lifecycle.Ready || q != lifecycle.Ready {
				t.Fatalf("a pod replaced: %s %s", p, q)
			}
		})
	}
}
