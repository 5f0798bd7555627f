package k8s

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// runElection takes part in the election on the Lease until Close. Losing
// the leadership makes this instance a standby, never a second writer; it
// may lead again later, after rebuilding its state from the cluster.
func (b *Backend) runElection(observed chan struct{}) {
	defer close(b.electionDone)
	var once sync.Once
	seen := func() { once.Do(func() { close(observed) }) }
	lock := &leaseLock{
		meta:   metav1.ObjectMeta{Name: b.cfg.LeaseName, Namespace: b.cfg.Namespace},
		client: b.client.CoordinationV1(), identity: b.identity, url: b.cfg.AdvertiseURL,
		observe: func(rec resourcelock.LeaderElectionRecord, url string) { b.observeLease(rec, url, time.Now()) },
	}
	for b.ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			Name:          "faas-gpu",
			LeaseDuration: b.cfg.LeaseDuration,
			RenewDeadline: b.cfg.RenewDeadline,
			RetryPeriod:   b.cfg.RetryPeriod,
			// On Close the Lease is released at once, so a standby (or the
			// next provider pod of a rolling update) takes over without
			// waiting for the Lease to expire.
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { b.lead(ctx, seen) },
				OnStoppedLeading: b.stopLeading,
				OnNewLeader: func(id string) {
					b.mu.Lock()
					b.leader = id
					b.mu.Unlock()
					if id != b.identity {
						b.log.Info("standby: another instance leads", zap.String("leader", id))
						seen()
					}
				},
			},
		})
		if err != nil {
			b.log.Error("leader election misconfigured", zap.Error(err))
			seen()
			return
		}
		le.Run(b.ctx)
	}
}

// lead runs while this instance holds the Lease: it rebuilds every
// decision from the cluster (the previous leader's writes are all there:
// it stopped writing before its Lease ran out), then runs the control loop.
func (b *Backend) lead(ctx context.Context, seen func()) {
	var st *state
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		st, err = b.restoreFromAPI(ctx)
		if err != nil {
			b.log.Error("cannot read the cluster to take over; retrying", zap.Error(err))
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return
	}
	st.deploymentExists = func(ns, name string) bool {
		_, err := b.deps.in(ns).Deployments(ns).Get(name)
		return err == nil
	}
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return
	}
	w := newWriter()
	// A restored function is not idle just because the leader changed:
	// the core counts its idle time from the rebuild.
	b.st, b.leading, b.leader, b.w = st, true, b.identity, w
	b.mu.Unlock()
	b.resvMu.Lock()
	b.resv = map[string]time.Time{}
	b.resvMu.Unlock()
	go b.runWriter(ctx, w)
	seen()
	b.log.Info("leading: placing replicas", zap.String("identity", b.identity), zap.Int("functions", len(st.core.Functions())),
		zap.Int("gpus", len(st.core.Inventory().Devices())), zap.Int("bookings", len(st.core.Allocator().Placements())))
	b.loop(ctx)
	b.stopLeading()
}

// stopLeading waits for writes in flight and drops the state: a standby
// reads the cluster instead.
func (b *Backend) stopLeading() {
	b.gate.Lock()
	defer b.gate.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leading {
		b.log.Info("stopped leading", zap.String("identity", b.identity))
	}
	b.leading, b.st = false, nil
	if b.leader == b.identity {
		b.leader = ""
	}
	if b.w != nil {
		// Requests waiting for a write are told to ask the next leader.
		b.w.stop(&standbyError{detail: "this instance stopped leading", retry: b.cfg.RetryPeriod})
		b.w = nil
	}
	b.written = map[string]map[string]bool{}
	b.lastWrite, b.held = nil, nil
}

// restoreFromAPI lists straight from the API server, not the informers: a
// new leader must see the previous leader's last writes.
func (b *Backend) restoreFromAPI(ctx context.Context) (*state, error) {
	if b.scope.clusterWide {
		b.ensureNamespace(ctx, DefaultNamespace, true)
	}
	hasFn := metav1.ListOptions{LabelSelector: LabelFunction + "," + LabelManagedBy + "=" + managedBy}
	nodes, err := b.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	objs := clusterObjects{}
	nodePtrs := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		nodePtrs[i] = &nodes.Items[i]
	}
	var problems []error
	objs.inventory, problems = inventoryFromNodes(nodePtrs, time.Now(), b.cfg.NodeLostAfter)
	for _, p := range problems {
		b.log.Warn("node's GPUs ignored", zap.Error(p))
	}
	for _, ns := range b.listNamespaces() {
		svcs, err := b.client.CoreV1().Services(ns).List(ctx, hasFn)
		if err != nil {
			return nil, fmt.Errorf("list function records: %w", err)
		}
		deps, err := b.client.AppsV1().Deployments(ns).List(ctx, hasFn)
		if err != nil {
			return nil, fmt.Errorf("list deployments: %w", err)
		}
		pods, err := b.client.CoreV1().Pods(ns).List(ctx, hasFn)
		if err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		for i := range svcs.Items {
			objs.records = append(objs.records, &svcs.Items[i])
		}
		for i := range deps.Items {
			objs.deployments = append(objs.deployments, &deps.Items[i])
		}
		for i := range pods.Items {
			objs.pods = append(objs.pods, &pods.Items[i])
		}
	}
	st, _ := restoreState(objs, b.coreOptions(), time.Now(), b.log)
	return st, nil // what the rebuild changed is written by the loop's first pass, which writes all
}

// ensureNamespace creates a namespace faas-gpu needs if it is missing;
// forFunctions labels it for OpenFaaS. Without the right to create it, the
// error shows up where the namespace is used.
func (b *Backend) ensureNamespace(ctx context.Context, name string, forFunctions bool) {
	if _, err := b.namespaces.Get(name); err == nil {
		return
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if forFunctions {
		ns.Labels = map[string]string{LabelNamespace: "1"}
	}
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.log.Warn("cannot create namespace", zap.String("namespace", name), zap.Error(err))
	}
}
