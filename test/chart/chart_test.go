package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/openfaas/faas-provider/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The install the README describes and yaml/ holds: release faas-gpu in
// namespace openfaas (the OpenFaaS namespace), functions in openfaas-fn.
const (
	release        = "faas-gpu"
	namespace      = "openfaas"
	fnNamespace    = "openfaas-fn"
	chartRel       = "chart/faas-gpu"
	manifestRel    = "yaml/faas-gpu.yaml"
	profilesDir    = "/etc/faas-gpu/profiles"
	secretMount    = "/var/secrets"
	defaultPipeDir = "/tmp/nvidia-mps"
)

var (
	rootOnce sync.Once
	root     string
	rootErr  error

	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// repoRoot is two levels up from this package, checked by its go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	rootOnce.Do(func() {
		r, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			rootErr = err
			return
		}
		mod, err := os.ReadFile(filepath.Join(r, "go.mod"))
		if err != nil || !strings.Contains(string(mod), "module github.com/faas-gpu/faas-gpu\n") {
			rootErr = fmt.Errorf("%s is not the root of github.com/faas-gpu/faas-gpu (go.mod: %v)", r, err)
			return
		}
		root = r
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return root
}

// helm builds (or reuses) helm with hack/build-helm.sh. A failure fails the
// test with the script's output: CI must be able to build helm, so the chart
// tests never skip.
func helm(t *testing.T) string {
	t.Helper()
	r := repoRoot(t)
	helmOnce.Do(func() {
		start := time.Now()
		cmd := exec.Command("bash", filepath.Join(r, "hack", "build-helm.sh"))
		cmd.Dir = r
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("hack/build-helm.sh failed (%v); it builds helm from the Go module proxy and CI needs it:\n%s%s", err, stderr.String(), stdout.String())
			return
		}
		helmPath = strings.TrimSpace(stdout.String())
		if st, err := os.Stat(helmPath); err != nil || st.IsDir() {
			helmErr = fmt.Errorf("hack/build-helm.sh printed %q, which is not a file:\n%s", helmPath, stderr.String())
			return
		}
		t.Logf("helm: %s (%s)", helmPath, time.Since(start).Round(time.Millisecond))
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// runHelm runs helm in the repository root and returns its stdout.
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	cmd.Dir = repoRoot(t)
	// Keep helm away from the user's repositories, plugins and kubeconfig.
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(tmp, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(tmp, "config"),
		"HELM_DATA_HOME="+filepath.Join(tmp, "data"),
		"KUBECONFIG="+filepath.Join(tmp, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.Bytes(), nil
}

// templateArgs is `helm template` of the chart as the README installs it.
func templateArgs(extra ...string) []string {
	return append([]string{"template", release, chartRel, "--namespace", namespace}, extra...)
}

// render renders the chart with extra helm arguments and decodes it.
func render(t *testing.T, extra ...string) *rendered {
	t.Helper()
	out, err := runHelm(t, templateArgs(extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decode(out)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(extra, " "), err)
	}
	checkObjects(t, r)
	return r
}

// ---- decoding ------------------------------------------------------------

// object is the part of every Kubernetes object the tests read; raw keeps
// the whole document for the rest.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Data     map[string]string `json:"data"`
	Rules    []policyRule      `json:"rules"`
	RoleRef  roleRef           `json:"roleRef"`
	Subjects []subject         `json:"subjects"`

	raw []byte
}

type policyRule struct {
	APIGroups     []string `json:"apiGroups"`
	Resources     []string `json:"resources"`
	ResourceNames []string `json:"resourceNames"`
	Verbs         []string `json:"verbs"`
}

type roleRef struct {
	APIGroup string `json:"apiGroup"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
}

type subject struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// workload is a Deployment or DaemonSet.
type workload struct {
	Spec struct {
		Replicas *int `json:"replicas"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	ServiceAccountName           string            `json:"serviceAccountName"`
	AutomountServiceAccountToken *bool             `json:"automountServiceAccountToken"`
	HostIPC                      bool              `json:"hostIPC"`
	HostPID                      bool              `json:"hostPID"`
	HostNetwork                  bool              `json:"hostNetwork"`
	RuntimeClassName             string            `json:"runtimeClassName"`
	NodeSelector                 map[string]string `json:"nodeSelector"`
	Tolerations                  []map[string]any  `json:"tolerations"`
	InitContainers               []container       `json:"initContainers"`
	Containers                   []container       `json:"containers"`
	Volumes                      []volume          `json:"volumes"`
	SecurityContext              map[string]any    `json:"securityContext"`
}

type container struct {
	Name            string         `json:"name"`
	Image           string         `json:"image"`
	Command         []string       `json:"command"`
	Args            []string       `json:"args"`
	Env             []envVar       `json:"env"`
	Ports           []port         `json:"ports"`
	VolumeMounts    []volumeMount  `json:"volumeMounts"`
	SecurityContext map[string]any `json:"securityContext"`
	ReadinessProbe  *probe         `json:"readinessProbe"`
	LivenessProbe   *probe         `json:"livenessProbe"`
	Lifecycle       map[string]any `json:"lifecycle"`
}

type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `json:"fieldPath"`
		} `json:"fieldRef"`
	} `json:"valueFrom"`
}

type port struct {
	Name          string `json:"name"`
	ContainerPort int    `json:"containerPort"`
}

type probe struct {
	HTTPGet *struct {
		Path string `json:"path"`
		Port any    `json:"port"`
	} `json:"httpGet"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly"`
}

type volume struct {
	Name     string `json:"name"`
	HostPath *struct {
		Path string `json:"path"`
		Type string `json:"type"`
	} `json:"hostPath"`
	Secret *struct {
		SecretName string `json:"secretName"`
	} `json:"secret"`
	ConfigMap *struct {
		Name string `json:"name"`
	} `json:"configMap"`
	EmptyDir map[string]any `json:"emptyDir"`
}

type service struct {
	Spec struct {
		Type     string            `json:"type"`
		Selector map[string]string `json:"selector"`
		Ports    []struct {
			Name       string `json:"name"`
			Port       int    `json:"port"`
			TargetPort any    `json:"targetPort"`
		} `json:"ports"`
	} `json:"spec"`
}

type rendered struct {
	objects []*object
}

func decode(out []byte) (*rendered, error) {
	r := &rendered{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		o := &object{raw: doc}
		if err := yaml.UnmarshalStrict(doc, &map[string]any{}); err != nil {
			return nil, fmt.Errorf("document %d is not valid YAML (%v):\n%s", i, err, doc)
		}
		if err := yaml.Unmarshal(doc, o); err != nil {
			return nil, fmt.Errorf("document %d: %v:\n%s", i, err, doc)
		}
		r.objects = append(r.objects, o)
	}
	return r, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t == "---" || strings.HasPrefix(t, "#") {
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.Bytes()
}

// find returns the objects of kind (and name, when given).
func (r *rendered) find(kind, name string) []*object {
	var out []*object
	for _, o := range r.objects {
		if o.Kind == kind && (name == "" || o.Metadata.Name == name) {
			out = append(out, o)
		}
	}
	return out
}

// one returns the single object of kind and name, failing otherwise.
func (r *rendered) one(t *testing.T, kind, name string) *object {
	t.Helper()
	got := r.find(kind, name)
	if len(got) != 1 {
		t.Fatalf("want one %s %q, rendered %d (objects: %s)", kind, name, len(got), r)
	}
	return got[0]
}

func (r *rendered) String() string {
	var s []string
	for _, o := range r.objects {
		s = append(s, o.Kind+"/"+o.Metadata.Namespace+"/"+o.Metadata.Name)
	}
	return strings.Join(s, ", ")
}

func (o *object) into(t *testing.T, v any) {
	t.Helper()
	if err := yaml.Unmarshal(o.raw, v); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
}

func (o *object) workload(t *testing.T) *workload {
	t.Helper()
	w := &workload{}
	o.into(t, w)
	return w
}

// ---- checks of every object ----------------------------------------------

var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	clusterScoped    = map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true}
	knownKinds       = map[string]string{
		"Namespace": "v1", "ServiceAccount": "v1", "ConfigMap": "v1", "Secret": "v1", "Service": "v1",
		"ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
		"Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
		"Deployment": "apps/v1", "DaemonSet": "apps/v1",
	}
)

// checkObjects holds for every render: known kinds at their stable API
// versions, valid names, namespaces where (and only where) they belong, the
// chart's labels, no duplicates, and workloads whose selectors match their
// pods.
func checkObjects(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.objects) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	seen := map[string]bool{}
	for _, o := range r.objects {
		id := o.Kind + "/" + o.Metadata.Namespace + "/" + o.Metadata.Name
		if seen[id] {
			t.Errorf("%s is rendered twice", id)
		}
		seen[id] = true
		want, ok := knownKinds[o.Kind]
		if !ok {
			t.Errorf("%s: kind %q is not one the chart is meant to create", id, o.Kind)
		} else if o.APIVersion != want {
			t.Errorf("%s: apiVersion %q, want %q", id, o.APIVersion, want)
		}
		nameRE, maxLen := dns1123Subdomain, 253
		if o.Kind == "Namespace" || o.Kind == "Service" || o.Kind == "Deployment" || o.Kind == "DaemonSet" {
			nameRE, maxLen = dns1123Label, 63
		}
		if !nameRE.MatchString(o.Metadata.Name) || len(o.Metadata.Name) > maxLen {
			t.Errorf("%s: name %q is not a valid %s name", id, o.Metadata.Name, o.Kind)
		}
		if clusterScoped[o.Kind] {
			if o.Metadata.Namespace != "" {
				t.Errorf("%s: a cluster-scoped object with a namespace", id)
			}
		} else if o.Metadata.Namespace == "" {
			t.Errorf("%s: no metadata.namespace (a plain `kubectl apply -f yaml/` would put it in the current namespace)", id)
		}
		for _, l := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
			if o.Metadata.Labels[l] == "" {
				t.Errorf("%s: no label %s", id, l)
			}
		}
		if o.Kind == "Deployment" || o.Kind == "DaemonSet" {
			w := o.workload(t)
			if len(w.Spec.Selector.MatchLabels) == 0 {
				t.Errorf("%s: empty selector", id)
			}
			for k, v := range w.Spec.Selector.MatchLabels {
				if w.Spec.Template.Metadata.Labels[k] != v {
					t.Errorf("%s: selector %s=%s does not match the pod template's labels", id, k, v)
				}
			}
			checkPodVolumes(t, id, &w.Spec.Template.Spec)
		}
	}
}

// checkPodVolumes: every mount names a volume of the pod, at most once per
// path.
func checkPodVolumes(t *testing.T, id string, p *podSpec) {
	t.Helper()
	vols := map[string]bool{}
	for _, v := range p.Volumes {
		vols[v.Name] = true
	}
	for _, c := range slices.Concat(p.InitContainers, p.Containers) {
		paths := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				t.Errorf("%s: container %s mounts volume %q, which the pod does not have", id, c.Name, m.Name)
			}
			if paths[m.MountPath] {
				t.Errorf("%s: container %s mounts %s twice", id, c.Name, m.MountPath)
			}
			paths[m.MountPath] = true
		}
	}
}

// ---- helpers on pods -------------------------------------------------------

func (c *container) env(name string) (envVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return envVar{}, false
}

func (c *container) mount(path string) (volumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m, true
		}
	}
	return volumeMount{}, false
}

func (p *podSpec) volume(name string) (volume, bool) {
	for _, v := range p.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return volume{}, false
}

func (p *podSpec) container(t *testing.T, name string) *container {
	t.Helper()
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// flagValue returns the value of -name=V or -name V (one or two dashes) in
// args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		for _, p := range []string{"-" + name, "--" + name} {
			if a == p && i+1 < len(args) {
				return args[i+1], true
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v, true
			}
		}
	}
	return "", false
}

// chartAppVersion is Chart.yaml's appVersion: the default image tag.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), chartRel, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml: no appVersion (%v)", err)
	}
	return c.AppVersion
}

// ---- the tests ------------------------------------------------------------

// allSwitches turns every optional part on.
var allSwitches = []string{
	"--set", "mps.enabled=true",
	"--set", "grafanaDashboard.enabled=true",
	"--set", "openfaas.existing=true",
	"--set", "agent.runtimeClassName=nvidia",
	"--set", "mps.runtimeClassName=nvidia",
}

func TestLintStrict(t *testing.T) {
	for name, extra := range map[string][]string{
		"defaults":     nil,
		"all switches": allSwitches,
		"cluster-wide RBAC, no basic auth, no agent": {
			"--set", "rbac.clusterWide=true", "--set", "basicAuth.enabled=false", "--set", "agent.enabled=false",
		},
		"standalone with password and two namespaces": {
			"--set", "basicAuth.password=s3cret", "--set", "rbac.functionNamespaces={openfaas-fn,team-a}",
		},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"lint", "--strict", chartRel}, extra...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(out, []byte("0 chart(s) failed")) {
				t.Fatalf("helm lint --strict:\n%s", out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "[WARNING]") || strings.Contains(line, "[ERROR]") {
					t.Errorf("helm lint --strict: %s", line)
				}
			}
		})
	}
}

// TestDefaults: what `helm install faas-gpu chart/faas-gpu -n openfaas`
// creates, and nothing optional.
func TestDefaults(t *testing.T) {
	r := render(t)
	want := []string{
		"Namespace//" + fnNamespace,
		"ServiceAccount/openfaas/faas-gpu", "ServiceAccount/openfaas/faas-gpu-agent",
		"ConfigMap/openfaas/faas-gpu-profiles",
		"ClusterRole//faas-gpu-nodes", "ClusterRole//faas-gpu-agent",
		"ClusterRoleBinding//faas-gpu-nodes", "ClusterRoleBinding//faas-gpu-agent",
		"Role/openfaas-fn/faas-gpu", "RoleBinding/openfaas-fn/faas-gpu",
		"Role/openfaas/faas-gpu-control", "RoleBinding/openfaas/faas-gpu-control",
		"Service/openfaas/faas-gpu",
		"Deployment/openfaas/faas-gpu",
		"DaemonSet/openfaas/faas-gpu-agent",
	}
	var got []string
	for _, o := range r.objects {
		got = append(got, o.Kind+"/"+o.Metadata.Namespace+"/"+o.Metadata.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("default objects:\n got %v\nwant %v", got, want)
	}
	ns := r.one(t, "Namespace", fnNamespace)
	if ns.Metadata.Labels["openfaas"] != "1" {
		t.Errorf("namespace %s: label openfaas=%q, want \"1\" (OpenFaaS's mark of a function namespace)", fnNamespace, ns.Metadata.Labels["openfaas"])
	}
	if ns.Metadata.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("namespace %s: not kept on uninstall (helm.sh/resource-policy: keep): uninstalling would delete the functions", fnNamespace)
	}
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: true, secret: "basic-auth", profilesCM: "faas-gpu-profiles", pipeDir: defaultPipeDir})
	checkAgent(t, r, "")
	checkRBAC(t, r, []string{fnNamespace}, false)
}

type providerWant struct {
	replicas   int
	basicAuth  bool
	secret     string
	profilesCM string
	pipeDir    string
}

// checkProvider: the provider Deployment and its Service as the gateway
// needs them (contract §1.2 and §2.1).
func checkProvider(t *testing.T, r *rendered, want providerWant) {
	t.Helper()
	d := r.one(t, "Deployment", "faas-gpu")
	w := d.workload(t)
	if w.Spec.Replicas == nil || *w.Spec.Replicas != want.replicas {
		t.Errorf("provider replicas %v, want %d", w.Spec.Replicas, want.replicas)
	}
	p := &w.Spec.Template.Spec
	c := p.container(t, "provider")

	if wantImage := "ghcr.io/faas-gpu/faas-gpu:" + chartAppVersion(t); c.Image != wantImage {
		t.Errorf("provider image %q, want %q (tag = appVersion)", c.Image, wantImage)
	}
	if len(c.Command) != 0 || len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("provider command %q args %q: want the image's entrypoint with args `serve ...`", c.Command, c.Args)
	}
	if _, ok := flagValue(c.Args, "kubeconfig"); ok {
		t.Errorf("provider args %q: -kubeconfig is not needed in a cluster", c.Args)
	}

	envs := map[string]string{}
	for _, e := range c.Env {
		if _, dup := envs[e.Name]; dup {
			t.Errorf("provider env %s set twice", e.Name)
		}
		envs[e.Name] = e.Value
	}
	// The OpenFaaS provider's variables.
	if envs["port"] != "8081" {
		t.Errorf("provider env port=%q, want 8081 (the gateway keeps 8080)", envs["port"])
	}
	if len(c.Ports) != 1 || fmt.Sprint(c.Ports[0].ContainerPort) != envs["port"] || c.Ports[0].Name != "http" {
		t.Errorf("provider ports %+v: want one port named http = env port %s", c.Ports, envs["port"])
	}
	for _, name := range []string{"read_timeout", "write_timeout"} {
		v, ok := envs[name]
		if !ok {
			t.Errorf("provider env %s is not set", name)
			continue
		}
		if d := types.ParseIntOrDurationValue(v, 0); d < 60*time.Second {
			t.Errorf("provider env %s=%q: want a duration of at least the gateway's 60s upstream_timeout", name, v)
		}
	}
	if envs["basic_auth"] != fmt.Sprint(want.basicAuth) {
		t.Errorf("provider env basic_auth=%q, want %v", envs["basic_auth"], want.basicAuth)
	}
	if envs["secret_mount_path"] != secretMount {
		t.Errorf("provider env secret_mount_path=%q, want %s (as the gateway)", envs["secret_mount_path"], secretMount)
	}
	m, mounted := c.mount(secretMount)
	if want.basicAuth {
		if !mounted || !m.ReadOnly {
			t.Errorf("provider: nothing read-only at %s, where basic_auth=true reads basic-auth-user and basic-auth-password", secretMount)
		} else if v, ok := p.volume(m.Name); !ok || v.Secret == nil || v.Secret.SecretName != want.secret {
			t.Errorf("provider: %s is volume %+v, want Secret %q", secretMount, v, want.secret)
		}
	} else if mounted {
		t.Errorf("provider: basic auth is off but %s is mounted", secretMount)
	}
	for _, name := range []string{"POD_NAME", "POD_NAMESPACE"} {
		e, _ := c.env(name)
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("provider env %s: want the downward API (leader election identity and Lease namespace)", name)
		}
	}
	if envs["function_namespace"] == "" {
		t.Errorf("provider env function_namespace is not set")
	}

	// Profiles: a ConfigMap mounted where -profiles points.
	dir, ok := flagValue(c.Args, "profiles")
	if !ok || dir != profilesDir {
		t.Errorf("provider args %q: want -profiles=%s", c.Args, profilesDir)
	}
	if m, ok := c.mount(dir); !ok {
		t.Errorf("provider: -profiles %s is not mounted", dir)
	} else if v, ok := p.volume(m.Name); !ok || v.ConfigMap == nil || v.ConfigMap.Name != want.profilesCM {
		t.Errorf("provider: %s is volume %+v, want ConfigMap %q", dir, v, want.profilesCM)
	}
	if v, _ := flagValue(c.Args, "mps-pipe-dir"); v != want.pipeDir {
		t.Errorf("provider -mps-pipe-dir=%q, want %q (the MPS daemon's pipe directory)", v, want.pipeDir)
	}

	// Probes on the provider's /healthz.
	for what, pr := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/healthz" || (fmt.Sprint(pr.HTTPGet.Port) != "http" && fmt.Sprint(pr.HTTPGet.Port) != envs["port"]) {
			t.Errorf("provider %s probe %+v: want GET /healthz on the http port", what, pr)
		}
	}
	// Hardening: no root, no privilege, read-only root filesystem.
	if p.SecurityContext["runAsNonRoot"] != true {
		t.Errorf("provider pod: runAsNonRoot is not true")
	}
	if c.SecurityContext["readOnlyRootFilesystem"] != true || c.SecurityContext["allowPrivilegeEscalation"] != false {
		t.Errorf("provider container security context %v: want a read-only root and no privilege escalation", c.SecurityContext)
	}
	if p.HostIPC || p.HostPID || p.HostNetwork {
		t.Errorf("provider pod shares a host namespace; it needs none")
	}

	// The provider's ServiceAccount, and the Service the gateway calls.
	r.one(t, "ServiceAccount", p.ServiceAccountName)
	var svc service
	r.one(t, "Service", "faas-gpu").into(t, &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8081 ||
		(fmt.Sprint(svc.Spec.Ports[0].TargetPort) != "http" && fmt.Sprint(svc.Spec.Ports[0].TargetPort) != envs["port"]) {
		t.Errorf("service ports %+v: want 8081 to the provider's http port", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if w.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("service selector %s=%s does not select the provider's pods", k, v)
		}
	}
	if svc.Spec.Selector["app.kubernetes.io/component"] != "provider" {
		t.Errorf("service selector %v: want only the provider's pods (component=provider)", svc.Spec.Selector)
	}
}

// checkAgent: the agent DaemonSet on GPU nodes, told its node by the
// downward API, with its own ServiceAccount.
func checkAgent(t *testing.T, r *rendered, runtimeClass string) {
	t.Helper()
	w := r.one(t, "DaemonSet", "faas-gpu-agent").workload(t)
	p := &w.Spec.Template.Spec
	c := p.container(t, "agent")
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Errorf("agent args %q: want `agent ...`", c.Args)
	}
	if want := "ghcr.io/faas-gpu/faas-gpu:" + chartAppVersion(t); c.Image != want {
		t.Errorf("agent image %q, want %q", c.Image, want)
	}
	e, ok := c.env("NODE_NAME")
	if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("agent env NODE_NAME %+v: want valueFrom.fieldRef.fieldPath spec.nodeName (the agent's -node-name default)", e)
	}
	if v, ok := flagValue(c.Args, "node-name"); ok && v != "$(NODE_NAME)" {
		t.Errorf("agent -node-name=%q overrides NODE_NAME", v)
	}
	if p.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("agent nodeSelector %v: want nvidia.com/gpu.present=true", p.NodeSelector)
	}
	if p.RuntimeClassName != runtimeClass {
		t.Errorf("agent runtimeClassName %q, want %q", p.RuntimeClassName, runtimeClass)
	}
	if e, _ := c.env("NVIDIA_VISIBLE_DEVICES"); e.Value != "all" {
		t.Errorf("agent env NVIDIA_VISIBLE_DEVICES=%q: want all, so NVML sees every GPU of the node", e.Value)
	}
	if v, _ := flagValue(c.Args, "metrics-port"); v != "9101" || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9101 {
		t.Errorf("agent -metrics-port=%q ports %+v: want 9101, the port /metrics and /healthz are on", v, c.Ports)
	} else if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("agent liveness probe %+v: want GET /healthz (it fails when the GPUs were not read for too long)", c.LivenessProbe)
	}
	if p.ServiceAccountName != "faas-gpu-agent" {
		t.Errorf("agent serviceAccountName %q, want faas-gpu-agent (its own, allowed to patch nodes)", p.ServiceAccountName)
	}
	r.one(t, "ServiceAccount", p.ServiceAccountName)
	if c.SecurityContext["privileged"] == true {
		t.Errorf("agent runs privileged; NVML needs only the device files the NVIDIA runtime adds")
	}
}

func TestExistingOpenFaaS(t *testing.T) {
	r := render(t, "--set", "openfaas.existing=true", "--set", "basicAuth.password=ignored")
	if got := r.find("Namespace", ""); len(got) != 0 {
		t.Errorf("openfaas.existing=true created a Namespace (%s): the OpenFaaS install has it", got[0].Metadata.Name)
	}
	if got := r.find("Secret", ""); len(got) != 0 {
		t.Errorf("openfaas.existing=true created a Secret (%s): the OpenFaaS install's basic-auth is used", got[0].Metadata.Name)
	}
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: true, secret: "basic-auth", profilesCM: "faas-gpu-profiles", pipeDir: defaultPipeDir})
	checkRBAC(t, r, []string{fnNamespace}, false)

	// Another secret name and function namespace.
	r = render(t, "--set", "openfaas.existing=true", "--set", "basicAuth.secretName=gw-auth", "--set", "openfaas.functionNamespace=gpu-fn")
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: true, secret: "gw-auth", profilesCM: "faas-gpu-profiles", pipeDir: defaultPipeDir})
	checkRBAC(t, r, []string{"gpu-fn"}, false)
	c := r.one(t, "Deployment", "faas-gpu").workload(t).Spec.Template.Spec.container(t, "provider")
	if e, _ := c.env("function_namespace"); e.Value != "gpu-fn" {
		t.Errorf("function_namespace=%q, want gpu-fn", e.Value)
	}
}

func TestStandaloneSecretAndNamespaces(t *testing.T) {
	r := render(t, "--set", "basicAuth.password=s3cret", "--set", "basicAuth.user=ops",
		"--set", "rbac.functionNamespaces={openfaas-fn,team-a}", "--set", "provider.replicas=2",
		"--set", "openfaas.createFunctionNamespace=false")
	var s struct {
		StringData map[string]string `json:"stringData"`
		Data       map[string]string `json:"data"`
	}
	r.one(t, "Secret", "basic-auth").into(t, &s)
	if s.StringData["basic-auth-user"] != "ops" || s.StringData["basic-auth-password"] != "s3cret" {
		t.Errorf("basic-auth Secret %v: want basic-auth-user=ops and basic-auth-password=s3cret", s.StringData)
	}
	if got := r.find("Namespace", ""); len(got) != 0 {
		t.Errorf("createFunctionNamespace=false still created %s", got[0].Metadata.Name)
	}
	checkProvider(t, r, providerWant{replicas: 2, basicAuth: true, secret: "basic-auth", profilesCM: "faas-gpu-profiles", pipeDir: defaultPipeDir})
	checkRBAC(t, r, []string{"openfaas-fn", "team-a"}, false)

	// Basic auth off: nothing mounted, basic_auth=false.
	r = render(t, "--set", "basicAuth.enabled=false", "--set", "basicAuth.password=unused")
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: false, profilesCM: "faas-gpu-profiles", pipeDir: defaultPipeDir})
	if got := r.find("Secret", ""); len(got) != 0 {
		t.Errorf("basicAuth.enabled=false created Secret %s", got[0].Metadata.Name)
	}
}

func TestMPSDaemon(t *testing.T) {
	r := render(t, allSwitches...)
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: true, secret: "basic-auth", profilesCM: "faas-gpu-profiles", pipeDir: defaultPipeDir})
	checkAgent(t, r, "nvidia")
	checkMPS(t, r, defaultPipeDir, "nvidia")

	// The pipe directory follows mps.pipeDirectory, in the daemon and in
	// what the provider gives replicas.
	r = render(t, "--set", "mps.enabled=true", "--set", "mps.pipeDirectory=/run/mps")
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: true, secret: "basic-auth", profilesCM: "faas-gpu-profiles", pipeDir: "/run/mps"})
	checkMPS(t, r, "/run/mps", "")
}

func checkMPS(t *testing.T, r *rendered, pipeDir, runtimeClass string) {
	t.Helper()
	w := r.one(t, "DaemonSet", "faas-gpu-mps").workload(t)
	p := &w.Spec.Template.Spec
	if !p.HostIPC {
		t.Errorf("MPS daemon: hostIPC is false; MPS clients in other pods reach the server through the host's IPC namespace")
	}
	if p.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("MPS daemon nodeSelector %v: want nvidia.com/gpu.present=true", p.NodeSelector)
	}
	if p.RuntimeClassName != runtimeClass {
		t.Errorf("MPS daemon runtimeClassName %q, want %q", p.RuntimeClassName, runtimeClass)
	}
	if p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
		t.Errorf("MPS daemon mounts a ServiceAccount token; it talks to no API server")
	}
	if len(p.InitContainers) != 1 || strings.Join(slices.Concat(p.InitContainers[0].Command, p.InitContainers[0].Args), " ") != "nvidia-smi -c EXCLUSIVE_PROCESS" {
		t.Errorf("MPS daemon init containers %+v: want one running `nvidia-smi -c EXCLUSIVE_PROCESS`", p.InitContainers)
	} else if p.InitContainers[0].SecurityContext["privileged"] != true {
		t.Errorf("MPS daemon: setting the compute mode needs a privileged init container")
	}
	c := p.container(t, "mps-control")
	if got := strings.Join(slices.Concat(c.Command, c.Args), " "); got != "nvidia-cuda-mps-control -f" {
		t.Errorf("MPS daemon runs %q, want `nvidia-cuda-mps-control -f` (foreground)", got)
	}
	if e, _ := c.env("CUDA_MPS_PIPE_DIRECTORY"); e.Value != pipeDir {
		t.Errorf("MPS daemon CUDA_MPS_PIPE_DIRECTORY=%q, want %q", e.Value, pipeDir)
	}
	m, ok := c.mount(pipeDir)
	if !ok {
		t.Fatalf("MPS daemon: %s is not mounted", pipeDir)
	}
	if v, ok := p.volume(m.Name); !ok || v.HostPath == nil || v.HostPath.Path != pipeDir {
		t.Errorf("MPS daemon: %s is volume %+v, want hostPath %s (function pods mount the same host folder)", pipeDir, v, pipeDir)
	}
	if c.Lifecycle["preStop"] == nil {
		t.Errorf("MPS daemon: no preStop hook to quit the daemon cleanly")
	}
}

func TestProfiles(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	os.WriteFile(values, []byte(`profiles:
  resnet50-a100.yaml: |
    version: faas-gpu/v1
    model: resnet50
    gpu: NVIDIA A100-SXM4-40GB
    memory: 1600Mi
    points:
    - {batch: 1, sm: 10, quota: 100, latency: 12.5}
    - {batch: 1, sm: 50, quota: 100, latency: 4.1}
  distilbert.yml:
    version: faas-gpu/v1
    model: distilbert-sst2
    gpu: NVIDIA A100-SXM4-40GB
    loadTime: 800ms
    points:
    - {batch: 1, sm: 20, quota: 100, latency: 6}
`), 0o644)
	r := render(t, "-f", values)
	cm := r.one(t, "ConfigMap", "faas-gpu-profiles")
	if len(cm.Data) != 2 {
		t.Fatalf("profiles ConfigMap holds %d files, want 2: %v", len(cm.Data), cm.Data)
	}
	for file, content := range cm.Data {
		p, err := profiles.Parse([]byte(content))
		if err != nil {
			t.Errorf("profiles ConfigMap %s does not load in the provider: %v\n%s", file, err, content)
			continue
		}
		t.Logf("%s: %s on %s, %d points", file, p.Model, p.GPU, len(p.Points))
	}
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: true, secret: "basic-auth", profilesCM: "faas-gpu-profiles", pipeDir: defaultPipeDir})

	// A change of profiles restarts the provider (it reads them at start).
	before := render(t).one(t, "Deployment", "faas-gpu").workload(t).Spec.Template.Metadata.Annotations["checksum/profiles"]
	after := r.one(t, "Deployment", "faas-gpu").workload(t).Spec.Template.Metadata.Annotations["checksum/profiles"]
	if before == "" || before == after {
		t.Errorf("checksum/profiles %q -> %q: want a pod annotation that changes with the profiles", before, after)
	}

	// An existing ConfigMap instead.
	r = render(t, "--set", "profilesConfigMap=my-profiles")
	if got := r.find("ConfigMap", "faas-gpu-profiles"); len(got) != 0 {
		t.Errorf("profilesConfigMap set, yet the chart renders its own profiles ConfigMap")
	}
	checkProvider(t, r, providerWant{replicas: 1, basicAuth: true, secret: "basic-auth", profilesCM: "my-profiles", pipeDir: defaultPipeDir})

	// A file the provider would ignore is refused at install.
	if _, err := runHelm(t, templateArgs("--set-string", "profiles.resnet50\\.json=x")...); err == nil {
		t.Errorf("a profiles entry not named *.yaml/*.yml renders; the provider would silently skip it")
	}
}

// TestServeAndAgentFlags: every flag the chart passes exists in the
// faas-gpu binary (`faas-gpu help` for serve; `faas-gpu agent -h`), so a
// renamed flag fails here and not as a crash-looping pod.
func TestServeAndAgentFlags(t *testing.T) {
	t.Parallel() // go build takes a while; the other tests go on meanwhile
	bin := filepath.Join(t.TempDir(), "faas-gpu")
	build := exec.Command("go", "build", "-o", bin, "github.com/faas-gpu/faas-gpu")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build faas-gpu: %v\n%s", err, out)
	}
	r := render(t, append(slices.Clone(allSwitches), "--set", "provider.functionRuntimeClassName=nvidia",
		"--set", "provider.functionImagePullPolicy=IfNotPresent",
		"--set", "provider.reservationImage=registry.example/pause:3.10", "--set", "agent.extraArgs={-nvml-library=/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1}")...)
	flagsOf := func(args ...string) (map[string]bool, string) {
		out, _ := exec.Command(bin, args...).CombinedOutput()
		flags := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^\s+-([a-zA-Z0-9][-a-zA-Z0-9_.]*)`).FindAllStringSubmatch(string(out), -1) {
			flags[m[1]] = true
		}
		return flags, string(out)
	}
	check := func(what string, args []string, known map[string]bool) {
		hasK8s := slices.ContainsFunc(slices.Collect(maps.Keys(known)), func(f string) bool { return strings.HasPrefix(f, "k8s-") })
		for _, a := range args[1:] {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if strings.HasPrefix(name, "k8s-") && !hasK8s {
				t.Logf("%s passes %s; this build's `faas-gpu %s` has no -k8s-* flags yet (the Kubernetes backend's), so it is not checked", what, a, args[0])
				continue
			}
			if !known[name] {
				t.Errorf("%s passes %s, which `faas-gpu %s` does not know", what, a, args[0])
			}
		}
	}

	serveFlags, help := flagsOf("help")
	if !serveFlags["profiles"] {
		t.Fatalf("`faas-gpu help` lists no -profiles flag; the flag list could not be read:\n%s", help)
	}
	for _, env := range []string{"port", "basic_auth", "secret_mount_path", "read_timeout", "write_timeout"} {
		if !regexp.MustCompile(`(?m)^\s+` + env + `\s`).MatchString(help) {
			t.Errorf("`faas-gpu help` does not document the variable %s the chart sets", env)
		}
	}
	c := r.one(t, "Deployment", "faas-gpu").workload(t).Spec.Template.Spec.container(t, "provider")
	check("the provider", c.Args, serveFlags)

	agentFlags, out := flagsOf("agent", "-h")
	if strings.Contains(out, `unknown verb "agent"`) {
		t.Skipf("this build has no agent verb yet; the agent's flags are not checked:\n%s", out)
	}
	if !agentFlags["interval"] || !agentFlags["node-name"] {
		t.Fatalf("`faas-gpu agent -h` lists no -interval or -node-name:\n%s", out)
	}
	a := r.one(t, "DaemonSet", "faas-gpu-agent").workload(t).Spec.Template.Spec.container(t, "agent")
	check("the agent", a.Args, agentFlags)
}

// TestManifestsFresh: yaml/faas-gpu.yaml is the chart rendered with its
// defaults, as `make manifests` writes it.
func TestManifestsFresh(t *testing.T) {
	fresh, err := runHelm(t, templateArgs()...)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(repoRoot(t), manifestRel))
	if err != nil {
		t.Fatalf("%s: %v (run make manifests)", manifestRel, err)
	}
	if !bytes.Equal(fresh, committed) {
		fl, cl := strings.Split(string(fresh), "\n"), strings.Split(string(committed), "\n")
		i := 0
		for i < len(fl) && i < len(cl) && fl[i] == cl[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "<end of file>"
		}
		t.Fatalf("%s is stale: run make manifests. First difference at line %d:\n committed: %s\n rendered:  %s",
			manifestRel, i+1, line(cl), line(fl))
	}
}
