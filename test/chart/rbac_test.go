package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// need is one permission the Kubernetes backend or the agent uses.
type need struct {
	group, resource, verb string
	// namespace is "" for a cluster-wide permission.
	namespace string
	// name, when set, is the one object asked for.
	name string
}

func (n need) String() string {
	where := "cluster-wide"
	if n.namespace != "" {
		where = "in " + n.namespace
	}
	g := n.group
	if g == "" {
		g = "core"
	}
	s := fmt.Sprintf("%s %s/%s %s", n.verb, g, n.resource, where)
	if n.name != "" {
		s += " (" + n.name + ")"
	}
	return s
}

// providerNeeds is what the Kubernetes backend (k8s/) calls: informers on
// nodes and on the Deployments, Services (function records), Pods and
// Secrets it owns; writes of those; pod logs; its function namespace's own
// object; and, in its own namespace, the leader-election Lease and the
// placeholder pods that hold GPUs against the device plugin. clusterWide
// adds listing and watching everywhere and managing namespaces
// (faas-cli namespace create).
func providerNeeds(fnNamespaces []string, clusterWide bool) []need {
	var n []need
	for _, v := range []string{"get", "list", "watch"} {
		n = append(n, need{"", "nodes", v, "", ""})
	}
	for _, ns := range fnNamespaces {
		for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
			n = append(n, need{"apps", "deployments", v, ns, ""}, need{"", "services", v, ns, ""}, need{"", "secrets", v, ns, ""})
		}
		n = append(n,
			need{"apps", "deployments", "deletecollection", ns, ""},
			need{"", "pods", "get", ns, ""},
			need{"", "pods", "list", ns, ""},
			need{"", "pods", "watch", ns, ""},
			need{"", "pods", "patch", ns, ""},  // a warm pod out of routing, a parked one adopted
			need{"", "pods", "delete", ns, ""}, // an evicted warm pod, a parked one
			need{"", "pods/log", "get", ns, ""},
			need{"", "namespaces", "get", ns, ns},
		)
	}
	for _, v := range []string{"get", "create", "update"} {
		n = append(n, need{"coordination.k8s.io", "leases", v, namespace, ""})
	}
	for _, v := range []string{"list", "watch", "create", "delete"} {
		n = append(n, need{"", "pods", v, namespace, ""})
	}
	if clusterWide {
		for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
			n = append(n, need{"", "namespaces", v, "", ""})
		}
		for _, res := range []string{"services", "pods", "secrets"} {
			n = append(n, need{"", res, "list", "", ""}, need{"", res, "watch", "", ""})
		}
		n = append(n, need{"apps", "deployments", "list", "", ""}, need{"apps", "deployments", "watch", "", ""})
	}
	return n
}

// grant is a rule and where it applies ("" = everywhere).
type grant struct {
	rule      policyRule
	namespace string
	from      string
}

// grantsOf collects the rules bound to a ServiceAccount of the release
// namespace.
func grantsOf(t *testing.T, r *rendered, sa string) []grant {
	t.Helper()
	bound := func(o *object) bool {
		for _, s := range o.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == namespace {
				return true
			}
		}
		return false
	}
	rulesOf := func(b *object, kind, name, ns string) []policyRule {
		if b.RoleRef.APIGroup != "rbac.authorization.k8s.io" {
			t.Errorf("%s %s/%s: roleRef apiGroup %q", b.Kind, b.Metadata.Namespace, b.Metadata.Name, b.RoleRef.APIGroup)
		}
		for _, o := range r.find(kind, name) {
			if o.Metadata.Namespace == ns {
				return o.Rules
			}
		}
		t.Errorf("%s %s/%s refers to %s %q, which the chart does not render there", b.Kind, b.Metadata.Namespace, b.Metadata.Name, kind, name)
		return nil
	}
	var g []grant
	for _, b := range r.find("ClusterRoleBinding", "") {
		if !bound(b) {
			continue
		}
		if b.RoleRef.Kind != "ClusterRole" {
			t.Errorf("ClusterRoleBinding %s refers to a %s", b.Metadata.Name, b.RoleRef.Kind)
		}
		for _, rule := range rulesOf(b, "ClusterRole", b.RoleRef.Name, "") {
			g = append(g, grant{rule, "", "ClusterRole " + b.RoleRef.Name})
		}
	}
	for _, b := range r.find("RoleBinding", "") {
		if !bound(b) {
			continue
		}
		ns := ""
		if b.RoleRef.Kind == "Role" {
			ns = b.Metadata.Namespace
		}
		for _, rule := range rulesOf(b, b.RoleRef.Kind, b.RoleRef.Name, ns) {
			g = append(g, grant{rule, b.Metadata.Namespace, b.RoleRef.Kind + " " + b.Metadata.Namespace + "/" + b.RoleRef.Name})
		}
	}
	return g
}

func has(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }

// allows is RBAC's rule matching (with the namespace of a namespace's own
// object being itself, as the API server sees GET /api/v1/namespaces/X).
func allows(gs []grant, n need) bool {
	for _, g := range gs {
		if g.namespace != "" && g.namespace != n.namespace {
			continue
		}
		r := g.rule
		if !has(r.APIGroups, n.group) || !has(r.Resources, n.resource) || !has(r.Verbs, n.verb) {
			continue
		}
		if len(r.ResourceNames) > 0 && (n.name == "" || !slices.Contains(r.ResourceNames, n.name)) {
			continue
		}
		return true
	}
	return false
}

// checkRBAC: the provider can do what the backend needs and no more: with
// clusterWide false, nothing cluster-wide but reading nodes, in its own
// namespace only the Lease and its placeholder pods (never the gateway's
// Secrets), nothing in other namespaces; the agent only gets and patches
// nodes; no wildcard anywhere.
func checkRBAC(t *testing.T, r *rendered, fnNamespaces []string, clusterWide bool) {
	t.Helper()
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, o := range r.find(kind, "") {
			for _, rule := range o.Rules {
				for _, l := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs} {
					if slices.Contains(l, "*") {
						t.Errorf("%s %s: a wildcard in %+v", kind, o.Metadata.Name, rule)
					}
				}
				if kind == "ClusterRole" && !clusterWide && !slices.Equal(rule.Resources, []string{"nodes"}) {
					t.Errorf("ClusterRole %s grants %v cluster-wide: with rbac.clusterWide=false the only cluster-wide permissions are on nodes", o.Metadata.Name, rule.Resources)
				}
			}
		}
	}

	provider := grantsOf(t, r, "faas-gpu")
	needs := providerNeeds(fnNamespaces, clusterWide)
	// Parked pods are the only ones the provider creates in a function
	// namespace: that right only where its flags park.
	args := r.one(t, "Deployment", "faas-gpu").workload(t).Spec.Template.Spec.container(t, "provider").Args
	parked := slices.Contains(args, "-k8s-parked=true")
	if parked {
		for _, ns := range fnNamespaces {
			needs = append(needs, need{"", "pods", "create", ns, ""})
		}
	}
	for _, n := range needs {
		if !allows(provider, n) {
			t.Errorf("the provider cannot %s", n)
		}
	}
	for _, g := range provider {
		switch {
		case g.namespace == "" && slices.Equal(g.rule.Resources, []string{"nodes"}):
			for _, v := range g.rule.Verbs {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("provider, %s: may %s nodes; it only reads them", g.from, v)
				}
			}
		case g.namespace == "":
			if !clusterWide {
				t.Errorf("provider, %s: %+v cluster-wide", g.from, g.rule)
			}
		case g.namespace == namespace && !slices.Contains(fnNamespaces, namespace):
			for _, res := range g.rule.Resources {
				if res != "leases" && res != "pods" {
					t.Errorf("provider, %s: %s in %s, the OpenFaaS namespace (the gateway's Secret is there); it needs only its Lease and placeholder pods", g.from, res, namespace)
				}
			}
		case !slices.Contains(fnNamespaces, g.namespace):
			t.Errorf("provider, %s: permissions in %s, which is not a function namespace", g.from, g.namespace)
		}
		if !clusterWide && slices.Contains(g.rule.Resources, "namespaces") && len(g.rule.ResourceNames) == 0 {
			t.Errorf("provider, %s: namespaces without resourceNames", g.from)
		}
	}
	never := []need{
		{"", "nodes", "patch", "", ""},
		{"", "pods/exec", "create", fnNamespaces[0], ""},
		{"", "serviceaccounts", "create", fnNamespaces[0], ""},
		{"rbac.authorization.k8s.io", "rolebindings", "create", fnNamespaces[0], ""},
	}
	if !parked {
		never = append(never, need{"", "pods", "create", fnNamespaces[0], ""})
	}
	if !clusterWide {
		never = append(never,
			need{"", "secrets", "get", namespace, "basic-auth"},
			need{"", "secrets", "list", namespace, ""},
			need{"", "namespaces", "list", "", ""},
			need{"", "namespaces", "create", "", ""},
			need{"apps", "deployments", "create", "kube-system", ""},
			need{"", "secrets", "list", "kube-system", ""},
		)
	}
	for _, n := range never {
		if allows(provider, n) {
			t.Errorf("the provider may %s; it should not", n)
		}
	}

	agent := grantsOf(t, r, "faas-gpu-agent")
	for _, n := range []need{{"", "nodes", "get", "", ""}, {"", "nodes", "patch", "", ""}} {
		if !allows(agent, n) {
			t.Errorf("the agent cannot %s (it writes the gpu.faas-gpu.dev/gpus annotation on its Node)", n)
		}
	}
	for _, g := range agent {
		if g.namespace != "" || !slices.Equal(g.rule.Resources, []string{"nodes"}) {
			t.Errorf("agent, %s: %+v; it needs only nodes", g.from, g.rule)
		}
		for _, v := range g.rule.Verbs {
			if v != "get" && v != "patch" {
				t.Errorf("agent, %s: may %s nodes; it needs get and patch", g.from, v)
			}
		}
	}
	if len(grantsOf(t, r, "default")) != 0 {
		t.Errorf("the chart grants something to the default ServiceAccount")
	}
}

func describeGrants(gs []grant) string {
	var s []string
	for _, g := range gs {
		s = append(s, fmt.Sprintf("[%s] %v %v %v", g.from, g.rule.APIGroups, g.rule.Resources, g.rule.Verbs))
	}
	return strings.Join(s, "; ")
}

func TestRBACDisabled(t *testing.T) {
	r := render(t, "--set", "rbac.create=false")
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if got := r.find(kind, ""); len(got) != 0 {
			t.Errorf("rbac.create=false still renders %s %s", kind, got[0].Metadata.Name)
		}
	}
}

func TestRBACClusterWide(t *testing.T) {
	r := render(t, "--set", "rbac.clusterWide=true")
	checkRBAC(t, r, []string{fnNamespace, "any-other"}, true)
	if got := r.find("Role", "faas-gpu"); len(got) != 0 {
		t.Errorf("rbac.clusterWide=true still renders function-namespace Roles")
	}
}

// With provider.parkedPods the provider may create pods in its function
// namespaces, for its parked pods; without, it may not (TestDefaults).
func TestRBACParkedPods(t *testing.T) {
	r := render(t, "--set", "provider.parkedPods=true")
	checkRBAC(t, r, []string{fnNamespace}, false)
	if !allows(grantsOf(t, r, "faas-gpu"), need{"", "pods", "create", fnNamespace, ""}) {
		t.Error("provider.parkedPods=true: the provider may not create its parked pods")
	}
}

func TestRBACExtraRules(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("rbac:\n  extraRules:\n  - apiGroups: [\"\"]\n    resources: [services]\n    verbs: [get, list]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := render(t, "-f", values)
	provider := grantsOf(t, r, "faas-gpu")
	if !allows(provider, need{"", "services", "list", fnNamespace, ""}) {
		t.Errorf("rbac.extraRules did not reach the provider's Role in %s", fnNamespace)
	}
	if allows(provider, need{"", "services", "list", namespace, ""}) {
		t.Errorf("rbac.extraRules leaked outside the function namespace")
	}
}
