package k8s

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leastPrivilege is all the provider needs when its function namespaces
// are fixed: read nodes; in each function namespace its Deployments (and
// their ReplicaSets and pods), Services, Secrets, pod logs and its own
// Namespace object; in its own namespace the Lease and the placeholder
// pods. docs/kubernetes.md lists the same.
func leastPrivilege(ctx context.Context, sa string) error {
	rules := map[string][]rbacv1.PolicyRule{
		fnNS: {
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
			{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services", "secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{fnNS}, Verbs: []string{"get", "update", "patch"}},
		},
		providerNS: {
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		},
	}
	c := env.client
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: providerNS}}
	if _, err := c.CoreV1().ServiceAccounts(providerNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for ns, r := range rules {
		if _, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: r}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa}}
		if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa + "-nodes"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa + "-nodes"}, Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: sa + "-nodes"}}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func tokenRequest() *authnv1.TokenRequest {
	return &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(3600)}}
}

// saKubeconfig is a kubeconfig authenticating as the service account.
func saKubeconfig(ctx context.Context, t *testing.T, sa string) string {
	t.Helper()
	tok, err := env.client.CoreV1().ServiceAccounts(providerNS).CreateToken(ctx, sa, tokenRequest(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return writeKubeconfig(t, tok.Status.Token)
}

func writeKubeconfig(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: sa, user: {token: %q}}]
contexts: [{name: local, context: {cluster: local, user: sa}}]
current-context: local
`, env.cluster.apiURL, token)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// With only Roles in its namespaces (the chart's least-privilege default)
// the provider finds it cannot watch the whole cluster, keeps to
// $function_namespace, and does everything there.
func TestLeastPrivilegeRBAC(t *testing.T) {
	requireNodes(t)
	ctx := context.Background()
	if err := leastPrivilege(ctx, "faas-gpu-restricted"); err != nil {
		t.Fatal(err)
	}
	p := startProviderAs(t, "restricted", saKubeconfig(ctx, t, "faas-gpu-restricted"), []string{"function_namespace=" + fnNS})
	p.leads(t, 15*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)
	if !strings.Contains(p.out.String(), "function namespaces: only this one") {
		t.Errorf("the provider did not notice its namespaced RBAC")
	}

	p.must(t, http.StatusAccepted, http.MethodPost, "/system/secrets", types.Secret{Name: "tok", Value: "x"})
	defer p.must(t, http.StatusAccepted, http.MethodDelete, "/system/secrets", types.Secret{Name: "tok"})
	f := fn("limited", 40, "2Gi")
	f.Secrets = []string{"tok"}
	p.deploy(t, f)
	p.scale(t, "limited", 3)
	p.ready(t, "limited", 3, 30*time.Second)
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 2 }); err != nil {
		t.Errorf("%d placeholders, want 2", len(reservations(t)))
	}
	if b := p.must(t, http.StatusOK, http.MethodGet, "/system/namespaces", nil); strings.TrimSpace(string(b)) != `["`+fnNS+`"]` {
		t.Errorf("namespaces: %s", b)
	}
	if code, _ := p.call(t, http.MethodPost, "/system/namespace/other", types.FunctionNamespace{Name: "other"}); code != http.StatusBadRequest {
		t.Errorf("creating a namespace with fixed namespaces: %d, want 400", code)
	}
	other := fn("elsewhere", 10, "1Gi")
	other.Namespace = "default"
	if code, _ := p.call(t, http.MethodPost, "/system/functions", other); code != http.StatusBadRequest {
		t.Errorf("deploying out of the function namespaces: %d, want 400", code)
	}
	p.remove(t, "limited")
	nothingLeft(t, 30*time.Second)
}
