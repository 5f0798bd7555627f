package k8s

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Concurrent deploys, queued for the one writer, each answer once their
// record is in the cluster.
func TestConcurrentDeploysAnswerOnceWritten(t *testing.T) {
	ctx := context.Background()
	b := fakeLeader(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("f%d", i)
			if err := b.Deploy(ctx, spec(name, 10, nil)); err != nil {
				errs <- err
				return
			}
			if _, err := b.client.CoreV1().Services("ns").Get(ctx, name, metav1.GetOptions{}); err != nil {
				errs <- fmt.Errorf("%s answered before its record was written: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A write that fails is retried by the queue, with nobody asking again,
// until the API server takes it.
func TestFailedWriteIsRetried(t *testing.T) {
	ctx := context.Background()
	b := fakeLeader(t)
	if err := b.Deploy(ctx, spec("f", 50, nil)); err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int32
	refuse := failing(b, "update", "services")
	b.client.(*fake.Clientset).PrependReactor("update", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		tries.Add(1)
		return false, nil, nil
	})
	refuse.Store(true)
	// As the control loop does (the autoscaler, a placement): change the
	// state and queue the key.
	b.mu.Lock()
	res, _, err := b.st.core.Scale("ns", "f", 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b.st.apply(res, 0, time.Now())
	b.enqueueLocked("ns/f")
	b.mu.Unlock()
	if err := poll(t, func() bool { return tries.Load() >= 3 }); err != nil {
		t.Fatalf("%d tries of the refused write; want it retried", tries.Load())
	}
	refuse.Store(false)
	err = poll(t, func() bool {
		svc, err := b.client.CoreV1().Services("ns").Get(ctx, "f", metav1.GetOptions{})
		return err == nil && svc.Annotations[AnnotationReplicas] == "2"
	})
	if err != nil {
		t.Fatalf("the record was not written once the API server took writes again (%d tries)", tries.Load())
	}
}

// failing makes the fake API server refuse verb on resource while on is
// set, as a quota, an admission webhook or an outage would.
func failing(b *Backend, verb, resource string) *atomic.Bool {
	var on atomic.Bool
	b.client.(*fake.Clientset).PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if on.Load() {
			return true, nil, errors.New("injected: the API server refuses")
		}
		return false, nil, nil
	})
	return &on
}

// fakeLeader is a fakeBackend leading with an empty state on cluster2x2,
// its writer running.
func fakeLeader(t *testing.T) *Backend {
	t.Helper()
	b := fakeBackend(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{LabelNamespace: "1"}}})
	st := testState(cluster2x2())
	st.deploymentExists = func(ns, name string) bool {
		_, err := b.deps.in(ns).Deployments(ns).Get(name)
		return err == nil
	}
	b.identity = "me"
	w := newWriter()
	b.mu.Lock()
	b.st, b.leading, b.leader, b.w = st, true, b.identity, w
	b.mu.Unlock()
	go b.runWriter(b.ctx, w)
	t.Cleanup(func() { w.stop(errors.New("test over")) })
	return b
}

func poll(t *testing.T, cond func() bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil })
}

// A caller that stops waiting (its request timed out) gets an error and
// the change is undone; the writer then writes the function as it was,
// so nothing of it stays in the cluster.
func TestGivingUpUndoesTheChange(t *testing.T) {
	b := fakeLeader(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Deploy(ctx, spec("f", 50, nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("deploy with a cancelled request: %v", err)
	}
	b.mu.Lock()
	exists := b.st.core.Has("ns/f")
	b.mu.Unlock()
	if exists {
		t.Fatal("the function stayed after its caller gave up")
	}
	err := poll(t, func() bool {
		_, err := b.client.CoreV1().Services("ns").Get(context.Background(), "f", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if err != nil {
		t.Fatal("the record of an undone deploy stayed in the cluster")
	}
}

// Requests still waiting when the instance stops leading are answered
// with the standby's refusal (503, Retry-After), not left hanging.
func TestStoppingToLeadAnswersWaitingRequests(t *testing.T) {
	b := fakeLeader(t)
	// A writer nobody runs: the deploy's key stays queued, as behind a
	// long write.
	idle := newWriter()
	b.mu.Lock()
	b.w = idle
	b.mu.Unlock()
	answer := make(chan error, 1)
	go func() { answer <- b.Deploy(context.Background(), spec("g", 10, nil)) }()
	if err := poll(t, func() bool { return idle.q.Len() > 0 }); err != nil {
		t.Fatal("the deploy was never queued")
	}
	b.stopLeading()
	var err error
	select {
	case err = <-answer:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting request was left hanging")
	}
	var later interface{ RetryAfter() time.Duration }
	if !errors.Is(err, ErrStandby) || !errors.As(err, &later) {
		t.Errorf("the request waiting when leadership ended: %v; want the standby's refusal", err)
	}
}
