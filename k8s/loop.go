package k8s

import (
	"context"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// loopPeriod bounds how long a change nobody kicked for (a node's
// readiness running out, a drain) waits; events wake the loop sooner.
const loopPeriod = 500 * time.Millisecond

// loop is the leader's control loop: it follows the inventory, ends
// drains, places pending replicas, autoscales, and queues what changed
// for the writer (queue.go).
func (b *Backend) loop(ctx context.Context) {
	tick := time.NewTicker(loopPeriod)
	defer tick.Stop()
	resync := time.NewTicker(b.cfg.Resync)
	defer resync.Stop()
	// The autoscaler's Tick and, between ticks, its Rise pass (a rising
	// rate answered at once), as local mode schedules them.
	passes := lifecycle.NewPasses(b.cfg.Tick, b.cfg.Rise, time.Now())
	scale := time.NewTicker(passes.Interval())
	defer scale.Stop()
	b.reconcile(true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kickc:
			b.reconcile(false)
		case <-tick.C:
			b.reconcile(false)
		case <-resync.C:
			b.reconcile(true)
		case now := <-scale.C:
			switch {
			case passes.TickDue(now):
				b.autoscale(now, false)
				b.reconcile(false)
			case b.riseAllowed() && b.autoscale(now, true):
				b.reconcile(false)
			}
		}
	}
}

// reconcile brings the decisions up to date with the cluster (nodes,
// drains, demotes confirmed, pods ready) and queues
// the functions that changed for writing, and the placeholders; all queues
// every function again.
func (b *Backend) reconcile(all bool) {
	b.txMu.Lock()
	defer b.txMu.Unlock()
	now := time.Now()
	b.mu.Lock()
	st := b.st
	if st == nil {
		b.mu.Unlock()
		return
	}
	inv := b.inventory(now)
	product := inv.MainProduct()
	b.product.Store(&product)
	var strays []strayPod
	if !st.core.Inventory().SameGPUs(inv) {
		// Pods a lost node kept may still run there now it is back.
		var pods []*corev1.Pod
		b.pods.each(func(l corelisters.PodLister) {
			ps, _ := l.List(labels.Everything())
			pods = append(pods, ps...)
		})
		strays = st.strays(pods)
	}
	if b.observeNodes(st, inv) {
		all = true // a placeholder's device changed: replicas are told it
	}
	dirty := st.setInventory(inv, strays, now)
	ended, placed := st.checkDrains(b.groupSettledLocked, now)
	for k := range placed {
		dirty[k] = true
	}
	for k := range st.confirmDemotes(now) {
		dirty[k] = true
	}
	// Pods turned ready: their bookings are ready for the core, and a
	// replacement retires what it replaces.
	for k := range st.reportReady(b.servingLocked(st), now) {
		dirty[k] = true
	}
	for k := range b.checkParkedLocked(st, now) {
		dirty[k] = true
	}
	if b.modelsTold.Swap(false) || all {
		b.feedModels(st, now)
	}
	for _, d := range ended {
		// Its Deployment, scaled to zero, can go now.
		if dep, err := b.deps.in(d.ns).Deployments(d.ns).Get(d.group); err == nil {
			dirty[fnKey(d.ns, dep.Labels[LabelFunction])] = true
		} else if d.fn != "" {
			dirty[d.fn] = true
		}
	}
	if all {
		for _, v := range st.core.Functions() {
			dirty[v.Key] = true
		}
	}
	// Deployments of functions that are gone (deleted while another
	// instance led, or by hand) are removed.
	b.deps.each(func(l appslisters.DeploymentLister) {
		deps, _ := l.List(labels.Everything())
		for _, d := range deps {
			k := fnKey(d.Namespace, d.Labels[LabelFunction])
			if !st.core.Has(k) && d.DeletionTimestamp == nil {
				dirty[k] = true
			}
		}
	})
	delete(dirty, "")
	b.enqueueLocked(sortedKeys(dirty)...)
	b.enqueueLocked(reservationsKey)
	b.mu.Unlock()
}

// inventory is the cluster's GPUs now; node problems are logged once.
func (b *Backend) inventory(now time.Time) gpu.Inventory {
	nodes, _ := b.nodes.List(labels.Everything())
	inv, problems := inventoryFromNodes(nodes, now, b.cfg.NodeLostAfter)
	for _, p := range problems {
		if !b.problems[p.Error()] {
			b.problems[p.Error()] = true
			b.log.Warn("node's GPUs ignored", zap.Error(p))
		}
	}
	return inv
}

// autoscale runs one pass of the lifecycle core at now, as local mode's
// Tick (or, with rise, its Rise between ticks) does, fed with what the
// proxy counted of each function. It reports whether a function changed.
func (b *Backend) autoscale(now time.Time, rise bool) bool {
	b.txMu.Lock()
	defer b.txMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st == nil {
		return false
	}
	changed := b.st.tick(now, b.observe, rise)
	b.sendLoadsLocked(b.st)
	b.enqueueLocked(sortedKeys(changed)...)
	return len(changed) > 0
}

// observe is what the proxy counted of function k, for the core.
func (b *Backend) observe(k string) lifecycle.Load {
	requests, last, _ := b.load(k)
	l := lifecycle.Load{Requests: requests, LastRequest: last, Backlog: b.backlog(k)}
	ns, name := splitKey(k)
	if ms, ok := b.cfg.Load.(ModelLoadSource); ok {
		l.Models, l.Loads = ms.Models(ns, name)
	}
	if ss, ok := b.cfg.Load.(SLOLoadSource); ok {
		l.SLOServed, l.SLOMissed = ss.SLO(ns, name)
	}
	return l
}
