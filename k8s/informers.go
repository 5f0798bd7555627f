package k8s

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// scope is where functions live. Cluster-wide, any namespace labelled
// openfaas=1 is a function namespace and namespaces can be made through
// the API; that needs a ClusterRole. Otherwise the function namespaces are
// a fixed list and the provider needs only Roles in them (least
// privilege, the chart's default).
type scope struct {
	clusterWide bool
	namespaces  []string // the function namespaces when not cluster-wide
}

func (s scope) has(ns string) bool {
	for _, n := range s.namespaces {
		if n == ns {
			return true
		}
	}
	return false
}

// decideScope: the namespaces given (-k8s-function-namespaces), else
// cluster-wide when RBAC lets this account list Deployments in all
// namespaces, else the one function namespace the OpenFaaS configuration
// names ($function_namespace, faas-netes' variable) or the default.
func decideScope(ctx context.Context, client kubernetes.Interface, given []string, log *zap.Logger) scope {
	if len(given) > 0 {
		ns := append([]string(nil), given...)
		sort.Strings(ns)
		log.Info("function namespaces given", zap.Strings("namespaces", ns))
		return scope{namespaces: ns}
	}
	allowed := true
	for _, ra := range []authv1.ResourceAttributes{
		{Verb: "watch", Group: "apps", Resource: "deployments"},
		{Verb: "watch", Resource: "secrets"},
		{Verb: "watch", Resource: "namespaces"},
	} {
		review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}
		got, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil || !got.Status.Allowed {
			allowed = false
			break
		}
	}
	if allowed {
		log.Info("function namespaces: every namespace labelled openfaas=1 (cluster-wide RBAC)")
		return scope{clusterWide: true}
	}
	ns := os.Getenv("function_namespace")
	if ns == "" {
		ns = DefaultNamespace
	}
	log.Info("function namespaces: only this one (no cluster-wide RBAC; list others with -k8s-function-namespaces)", zap.String("namespace", ns))
	return scope{namespaces: []string{ns}}
}

// multi holds a lister per namespace, or one for all namespaces under the
// key "".
type multi[L any] struct {
	byNS  map[string]L
	empty L
}

// in is the lister that sees namespace ns; an empty one for namespaces out
// of scope.
func (m multi[L]) in(ns string) L {
	if l, ok := m.byNS[""]; ok {
		return l
	}
	if l, ok := m.byNS[ns]; ok {
		return l
	}
	return m.empty
}

func (m multi[L]) each(f func(L)) {
	for _, l := range m.byNS {
		f(l)
	}
}

func emptyIndexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// startInformers watches, in the scope's namespaces, the objects faas-gpu
// owns (Deployments, their ReplicaSets and pods, Services) and the secrets
// made through the API; the placeholder pods in the provider's namespace;
// GPU nodes; and, cluster-wide, namespaces. It waits for the first lists.
func (b *Backend) startInformers() error {
	owned := func(o *metav1.ListOptions) { o.LabelSelector = LabelManagedBy + "=" + managedBy }
	apiSecrets := func(o *metav1.ListOptions) { o.LabelSelector = LabelManagedBy + "=" + secretManagedBy }
	factory := func(ns string, tweak func(*metav1.ListOptions)) informers.SharedInformerFactory {
		opts := []informers.SharedInformerOption{informers.WithTweakListOptions(tweak)}
		if ns != "" {
			opts = append(opts, informers.WithNamespace(ns))
		}
		return informers.NewSharedInformerFactoryWithOptions(b.client, 0, opts...)
	}
	kick := func(any) { b.kick() }
	var factories []informers.SharedInformerFactory
	var regErr error
	handle := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) {
		if _, err := inf.AddEventHandler(h); err != nil && regErr == nil {
			regErr = err
		}
	}

	b.deps = multi[appslisters.DeploymentLister]{byNS: map[string]appslisters.DeploymentLister{}, empty: appslisters.NewDeploymentLister(emptyIndexer())}
	b.rss = multi[appslisters.ReplicaSetLister]{byNS: map[string]appslisters.ReplicaSetLister{}, empty: appslisters.NewReplicaSetLister(emptyIndexer())}
	b.svcs = multi[corelisters.ServiceLister]{byNS: map[string]corelisters.ServiceLister{}, empty: corelisters.NewServiceLister(emptyIndexer())}
	b.pods = multi[corelisters.PodLister]{byNS: map[string]corelisters.PodLister{}, empty: corelisters.NewPodLister(emptyIndexer())}
	b.secrets = multi[corelisters.SecretLister]{byNS: map[string]corelisters.SecretLister{}, empty: corelisters.NewSecretLister(emptyIndexer())}
	namespaces := b.scope.namespaces
	if b.scope.clusterWide {
		namespaces = []string{""}
	}
	for _, ns := range namespaces {
		of, sf := factory(ns, owned), factory(ns, apiSecrets)
		dep, svc, pod, sec := of.Apps().V1().Deployments(), of.Core().V1().Services(), of.Core().V1().Pods(), sf.Core().V1().Secrets()
		b.deps.byNS[ns], b.svcs.byNS[ns], b.pods.byNS[ns], b.secrets.byNS[ns] = dep.Lister(), svc.Lister(), pod.Lister(), sec.Lister()
		// A pod gone may end a drain and free a GPU share; a pod ready
		// ends a start-up.
		handle(pod.Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: b.podUpdated, DeleteFunc: b.podDeleted})
		// A Deployment deleted behind faas-gpu's back is written again.
		handle(dep.Informer(), cache.ResourceEventHandlerFuncs{DeleteFunc: kick})
		if b.may(b.ctx, "watch", "apps", "replicasets", ns) {
			// A ReplicaSet gone may end a drain.
			rs := of.Apps().V1().ReplicaSets()
			b.rss.byNS[ns] = rs.Lister()
			handle(rs.Informer(), cache.ResourceEventHandlerFuncs{DeleteFunc: kick})
		} else {
			b.log.Warn("cannot watch ReplicaSets: a drained replica's GPU share is freed on its Deployment's status and pods alone; grant get, list, watch on apps/replicasets (docs/kubernetes.md)", zap.String("namespace", ns))
		}
		// A function's record is decoded once, when it changes, for the
		// proxy's lookups (routeinfo.go), not once per request.
		handle(svc.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: b.recordSeen, UpdateFunc: func(_, o any) { b.recordSeen(o) }, DeleteFunc: b.recordGone})
		_ = sec.Informer()
		factories = append(factories, of, sf)
	}
	if b.scope.clusterWide {
		b.resvPods = b.pods.in(b.cfg.Namespace)
	} else {
		rf := factory(b.cfg.Namespace, owned)
		b.resvPods = rf.Core().V1().Pods().Lister()
		factories = append(factories, rf)
	}
	cluster := informers.NewSharedInformerFactory(b.client, 0)
	nodes := cluster.Core().V1().Nodes()
	b.nodes = nodes.Lister()
	// A node added, changed (GPUs, readiness) or gone changes the inventory.
	handle(nodes.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: kick, UpdateFunc: func(_, _ any) { b.kick() }, DeleteFunc: kick})
	if b.scope.clusterWide {
		b.namespaces = cluster.Core().V1().Namespaces().Lister()
	}
	factories = append(factories, cluster)
	if regErr != nil {
		return fmt.Errorf("kubernetes: informer: %w", regErr)
	}

	for _, f := range factories {
		f.Start(b.ctx.Done())
	}
	syncCtx, cancelSync := context.WithTimeout(b.ctx, time.Minute)
	defer cancelSync()
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return fmt.Errorf("kubernetes: the %v informer did not sync within a minute: can the provider's account list and watch it? (docs/kubernetes.md, RBAC)", typ)
			}
		}
	}
	return nil
}

// may asks the API server whether this account may do verb on resource in
// namespace ns ("": all).
func (b *Backend) may(ctx context.Context, verb, group, resource, ns string) bool {
	review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
		Verb: verb, Group: group, Resource: resource, Namespace: ns,
	}}}
	got, err := b.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	return err == nil && got.Status.Allowed
}

// listNamespaces are the namespaces to list from the API server: all at
// once, or each function namespace.
func (b *Backend) listNamespaces() []string {
	if b.scope.clusterWide {
		return []string{metav1.NamespaceAll}
	}
	return b.scope.namespaces
}

// podDeleted forgets a gone pod's request counter, models, whether it
// takes model loads, and start-up.
func (b *Backend) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		b.inflight.Delete(p.UID)
		b.podSlice.Delete(p.UID)
		b.podModel.Delete(p.Name)
		b.podLoads.Delete(p.Name)
		b.takesNoLoads.Delete(p.UID)
		b.mu.Lock()
		if b.st != nil {
			delete(b.st.started, p.UID)
		}
		b.mu.Unlock()
	}
	b.kick()
}

// podUpdated counts, on the leader, the start-up of a function's pod the
// first time it turns ready, and wakes the loop (which tells the core the
// booking paired with it is ready): ready again (after a restart or a failed
// probe) it did not just start. Only pods made since this instance took
// the lead count: an earlier leader saw the others.
func (b *Backend) podUpdated(oldObj, newObj any) {
	old, ok := oldObj.(*corev1.Pod)
	if !ok {
		return
	}
	p, ok := newObj.(*corev1.Pod)
	if !ok || p.Labels[LabelGroup] == "" || podReady(old) || !podReady(p) {
		return
	}
	// Its booking is ready for the core (reconcile): a replacement
	// waiting for it retires what it replaces without waiting a period.
	defer b.kick()
	d, ok := podStartup(p)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.st
	// Creation times are whole seconds: a pod made in the second the
	// state was counts.
	if st == nil || st.started[p.UID] || p.CreationTimestamp.Time.Before(st.since.Truncate(time.Second)) {
		return
	}
	st.started[p.UID] = true
	st.stats.Started(d)
	b.cacheMisses.Add(1) // the pod loaded its model to become ready
}

// podStartup is how long pod p took from its creation to its last Ready
// transition, to the second (Kubernetes' timestamps); false while it is
// not ready.
func podStartup(p *corev1.Pod) (time.Duration, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() && !p.CreationTimestamp.IsZero() {
			return max(c.LastTransitionTime.Sub(p.CreationTimestamp.Time), 0), true
		}
	}
	return 0, false
}

func parseNamespaces(v string) []string {
	var out []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}
