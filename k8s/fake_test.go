package k8s

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeBackend is a Backend on client-go's fake clientset, for the edges
// the real-API-server tests in test/k8s do not reach cheaply.
func fakeBackend(t *testing.T, objs ...runtime.Object) *Backend {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &Backend{
		client: fake.NewClientset(objs...), log: zap.NewNop(), cfg: Config{Options: DefaultOptions()}, ctx: ctx, cancel: cancel,
		scope: scope{clusterWide: true}, kickc: make(chan struct{}, 1),
		written: map[string]map[string]bool{}, resv: map[string]time.Time{}, problems: map[string]bool{},
	}
	if err := b.startInformers(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSecretErrorsMapToStatusCodes(t *testing.T) {
	ctx := context.Background()
	b := fakeBackend(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DefaultNamespace}})
	s := types.Secret{Name: "k", Namespace: DefaultNamespace, Value: "v"}
	if err := b.CreateSecret(ctx, s); err != nil {
		t.Fatal(err)
	}
	var fe *gpu.FieldError
	for name, err := range map[string]error{
		"duplicate":          b.CreateSecret(ctx, s),
		"update missing":     b.UpdateSecret(ctx, types.Secret{Name: "nope", Namespace: DefaultNamespace, Value: "x"}),
		"delete missing":     b.DeleteSecret(ctx, DefaultNamespace, "nope"),
		"unknown namespace":  b.CreateSecret(ctx, types.Secret{Name: "k", Namespace: "elsewhere", Value: "v"}),
		"namespace conflict": b.CreateNamespace(ctx, types.FunctionNamespace{Name: DefaultNamespace}),
	} {
		want := map[string]func(error) bool{
			"duplicate":          func(e error) bool { return errors.Is(e, fs.ErrExist) },
			"update missing":     func(e error) bool { return errors.Is(e, fs.ErrNotExist) },
			"delete missing":     func(e error) bool { return errors.Is(e, fs.ErrNotExist) },
			"unknown namespace":  func(e error) bool { return errors.As(e, &fe) },
			"namespace conflict": func(e error) bool { return errors.Is(e, fs.ErrExist) },
		}[name]
		if !want(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	got, err := b.client.CoreV1().Secrets(DefaultNamespace).Get(ctx, "k", metav1.GetOptions{})
	if err != nil || string(got.Data["k"]) != "v" || got.Labels[LabelManagedBy] != "openfaas" {
		t.Errorf("secret %+v %v", got, err)
	}
}

// A standby refuses changes, naming the leader, and never writes.
func TestStandbyRefusesChanges(t *testing.T) {
	b := fakeBackend(t)
	b.leader = "the-leader"
	err := b.Scale(context.Background(), DefaultNamespace, "f", 2)
	if !errors.Is(err, ErrStandby) || !strings.Contains(err.Error(), "the-leader") {
		t.Fatalf("scale on a standby: %v", err)
	}
	// The handlers answer 503 with Retry-After for an error that says when
	// to come back: the Lease's retry period, when a standby may lead.
	var later interface{ RetryAfter() time.Duration }
	if !errors.As(err, &later) || later.RetryAfter() != b.cfg.RetryPeriod || b.cfg.RetryPeriod <= 0 {
		t.Fatalf("the standby's refusal %v does not say when to retry (retry period %v)", err, b.cfg.RetryPeriod)
	}
	if err := b.syncFunction(context.Background(), "ns/f"); !errors.Is(err, ErrStandby) {
		t.Fatalf("sync on a standby: %v", err)
	}
	for _, a := range b.client.(*fake.Clientset).Actions() {
		// Asking what it may do (startInformers) is no write.
		if v := a.GetVerb(); v != "list" && v != "watch" && v != "get" && a.GetResource().Resource != "selfsubjectaccessreviews" {
			t.Errorf("a standby wrote: %s %s", v, a.GetResource())
		}
	}
}

// applyDeployment keeps what the Deployment controller wrote.
func TestApplyDeploymentKeepsOthersAnnotations(t *testing.T) {
	ctx := context.Background()
	b := fakeBackend(t)
	g := groupSpec{Function: spec("f", 50, nil), Name: "f-1", Placement: placement("a", "GPU-a0"), Config: scheduler.SliceConfig{SMPercent: 50}, Replicas: 1}
	d := renderDeployment(g, renderOptions{})
	if err := b.applyDeployment(ctx, d); err != nil {
		t.Fatal(err)
	}
	cur, _ := b.client.AppsV1().Deployments("ns").Get(ctx, "f-1", metav1.GetOptions{})
	cur.Annotations["deployment.kubernetes.io/revision"] = "3"
	if _, err := b.client.AppsV1().Deployments("ns").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	g.Replicas = 2
	if err := b.applyDeployment(ctx, renderDeployment(g, renderOptions{})); err != nil {
		t.Fatal(err)
	}
	cur, _ = b.client.AppsV1().Deployments("ns").Get(ctx, "f-1", metav1.GetOptions{})
	if *cur.Spec.Replicas != 2 || cur.Annotations["deployment.kubernetes.io/revision"] != "3" {
		t.Errorf("replicas %d, annotations %v", *cur.Spec.Replicas, cur.Annotations)
	}
}
