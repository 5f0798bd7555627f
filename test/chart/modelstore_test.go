package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const defaultStore = "/var/lib/faas-gpu/models"

// The node model store: the agent reads it read-only and reports it, the
// provider mounts it into function pods; modelStore.path="" turns all of
// it off. The agent reads the kubelet's PodResources socket by default.
func TestModelStoreAndPodResources(t *testing.T) {
	tests := []struct {
		name       string
		set        []string
		store      string
		podRes     bool
		initFetchs []string
	}{
		{name: "defaults", store: defaultStore, podRes: true},
		{name: "no store", set: []string{"--set", "modelStore.path="}, podRes: true},
		{name: "another folder, no PodResources", set: []string{"--set", "modelStore.path=/data/models", "--set", "agent.podResources.enabled=false"}, store: "/data/models"},
		{name: "fetch by HTTP and OCI", set: []string{
			"--set", "modelStore.fetch.models[0].name=resnet50", "--set", "modelStore.fetch.models[0].http=https://models.example/resnet50.pt",
			"--set", "modelStore.fetch.models[1].name=bert", "--set", "modelStore.fetch.models[1].oci=registry.example/models/bert:1",
		}, store: defaultStore, podRes: true, initFetchs: []string{"fetch-models-http", "fetch-models-oci"}},
		{name: "fetch without a store fetches nothing", set: []string{"--set", "modelStore.path=",
			"--set", "modelStore.fetch.models[0].name=resnet50", "--set", "modelStore.fetch.models[0].http=https://models.example/resnet50.pt"}, podRes: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, tt.set...)
			ds := r.one(t, "DaemonSet", "faas-gpu-agent").workload(t).Spec.Template.Spec
			a := ds.container(t, "agent")
			prov := r.one(t, "Deployment", "faas-gpu").workload(t).Spec.Template.Spec.container(t, "provider")

			m, mounted := a.mount(tt.store)
			v, hasVol := ds.volume("model-store")
			if tt.store == "" {
				if hasVol || slices.ContainsFunc(a.Args, func(s string) bool { return strings.HasPrefix(s, "-model-store") }) ||
					slices.ContainsFunc(prov.Args, func(s string) bool { return strings.HasPrefix(s, "-k8s-model-store") }) {
					t.Errorf("no store, yet a store volume or flag: agent %v provider %v", a.Args, prov.Args)
				}
			} else {
				if !mounted || !m.ReadOnly || !hasVol || v.HostPath == nil || v.HostPath.Path != tt.store {
					t.Errorf("agent's store: mount %+v (read-only wanted), volume %+v", m, v)
				}
				if !slices.Contains(a.Args, "-model-store="+tt.store) || !slices.Contains(prov.Args, "-k8s-model-store="+tt.store) {
					t.Errorf("store flags: agent %v provider %v", a.Args, prov.Args)
				}
			}

			_, sockMounted := a.mount("/var/lib/kubelet/pod-resources")
			hasSock := slices.Contains(a.Args, "-pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock")
			if sockMounted != tt.podRes || hasSock != tt.podRes {
				t.Errorf("PodResources: mounted %v, flag %v; want %v", sockMounted, hasSock, tt.podRes)
			}
			if tt.podRes && a.SecurityContext["runAsUser"] != float64(0) {
				t.Errorf("agent reads the root-owned kubelet socket as %v, not root", a.SecurityContext["runAsUser"])
			}
			if ns, ok := a.env("POD_NAMESPACE"); !ok || ns.ValueFrom == nil || ns.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
				t.Errorf("agent has no POD_NAMESPACE for -placeholder-namespace")
			}

			var inits []string
			for _, c := range ds.InitContainers {
				inits = append(inits, c.Name)
				if wm, ok := c.mount(tt.store); !ok || wm.ReadOnly {
					t.Errorf("%s cannot write the store: %+v", c.Name, wm)
				}
			}
			if !slices.Equal(inits, tt.initFetchs) {
				t.Errorf("init containers %v, want %v", inits, tt.initFetchs)
			}
		})
	}
}

func TestModelStoreFetchRejectsBadModels(t *testing.T) {
	tests := []struct {
		name string
		set  []string
	}{
		{"no source", []string{"--set", "modelStore.fetch.models[0].name=resnet50"}},
		{"both sources", []string{"--set", "modelStore.fetch.models[0].name=m", "--set", "modelStore.fetch.models[0].http=https://x/m", "--set", "modelStore.fetch.models[0].oci=r/m:1"}},
		{"a path as name", []string{"--set", "modelStore.fetch.models[0].name=../etc", "--set", "modelStore.fetch.models[0].http=https://x/m"}},
		{"not http", []string{"--set", "modelStore.fetch.models[0].name=m", "--set", "modelStore.fetch.models[0].http=file:///etc/passwd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := runHelm(t, templateArgs(tt.set...)...); err == nil {
				t.Fatalf("helm template accepted it:\n%.400s", out)
			}
		})
	}
}

// The HTTP fetch script, run with a stand-in curl: a model lands in the
// store under its name, fetched once; a failed fetch leaves nothing the
// agent would report.
func TestModelStoreFetchScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh to run the fetch script: %v", err)
	}
	r := render(t, "--set", "modelStore.fetch.models[0].name=resnet50", "--set", "modelStore.fetch.models[0].http=https://models.example/resnet50.pt?sig=1",
		"--set", "modelStore.fetch.models[1].name=broken", "--set", "modelStore.fetch.models[1].http=https://models.example/broken.pt")
	ds := r.one(t, "DaemonSet", "faas-gpu-agent").workload(t).Spec.Template.Spec
	var script string
	for _, c := range ds.InitContainers {
		if c.Name == "fetch-models-http" {
			script = c.Args[0]
		}
	}
	if script == "" {
		t.Fatal("no fetch-models-http init container")
	}
	bin, store := t.TempDir(), t.TempDir()
	calls := filepath.Join(bin, "calls")
	// curl -fsSL --retry 3 -o FILE URL: writes FILE, fails for "broken".
	fake := "#!/bin/sh\necho \"$@\" >> " + calls + "\nout=$5; url=$6\ncase $url in *broken*) exit 22;; esac\necho weights > \"$out\"\n"
	if err := os.WriteFile(filepath.Join(bin, "curl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func() error {
		cmd := exec.Command(sh, "-ec", script)
		cmd.Env = append(os.Environ(), "STORE="+store, "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		t.Logf("fetch: %s", out)
		return err
	}
	if err := run(); err == nil {
		t.Fatal("a failed download did not fail the init container")
	}
	if b, err := os.ReadFile(filepath.Join(store, "resnet50", "resnet50.pt")); err != nil || string(b) != "weights\n" {
		t.Fatalf("resnet50 not in the store as resnet50/resnet50.pt: %q %v", b, err)
	}
	entries, _ := os.ReadDir(store)
	for _, e := range entries {
		if e.Name() == "broken" {
			t.Fatal("a failed fetch left a model the agent would report")
		}
	}
	// Again: resnet50 is kept, not fetched a second time.
	_ = run()
	b, _ := os.ReadFile(calls)
	if n := strings.Count(string(b), ".fetch-resnet50/"); n != 1 {
		t.Fatalf("resnet50 downloaded %d times, want once:\n%s", n, b)
	}
}
