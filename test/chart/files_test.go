package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/go-sdk/stack"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// TestStackExample: yaml/stack.yml parses as faas-cli parses it, and every
// function's GPU annotations and scale labels pass the provider's own
// validation.
func TestStackExample(t *testing.T) {
	services, err := stack.ParseYAMLFile(filepath.Join(repoRoot(t), "yaml", "stack.yml"), "", "", true)
	if err != nil {
		t.Fatalf("yaml/stack.yml: %v", err)
	}
	if len(services.Functions) == 0 {
		t.Fatal("yaml/stack.yml has no functions")
	}
	for name, fn := range services.Functions {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%s: not a valid function name: %v", name, errs)
		}
		if fn.Image == "" {
			t.Errorf("%s: no image", name)
		}
		if fn.Namespace != fnNamespace {
			t.Errorf("%s: namespace %q, want the chart's function namespace %s", name, fn.Namespace, fnNamespace)
		}
		labels, annotations := map[string]string{}, map[string]string{}
		if fn.Labels != nil {
			labels = *fn.Labels
		}
		if fn.Annotations != nil {
			annotations = *fn.Annotations
		}
		for k, v := range labels {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("%s: label %s=%q: %v", name, k, v, errs)
			}
		}
		if !slices.ContainsFunc(slices.Collect(mapKeys(annotations)), func(k string) bool { return strings.HasPrefix(k, "com.openfaas.gpu.") }) {
			t.Errorf("%s: no com.openfaas.gpu.* annotation; the example is about them", name)
		}
		req, err := gpu.ParseRequest(name, annotations, "")
		if err != nil {
			t.Errorf("%s: the provider would refuse its annotations: %v", name, err)
		}
		if _, err := scheduler.ParseScalePolicy(labels, annotations); err != nil {
			t.Errorf("%s: the provider would refuse its scale labels: %v", name, err)
		}
		for what, res := range map[string]*stack.FunctionResources{"limits": fn.Limits, "requests": fn.Requests} {
			if res == nil {
				continue
			}
			for k, v := range map[string]string{"memory": res.Memory, "cpu": res.CPU} {
				if _, err := resource.ParseQuantity(v); v != "" && err != nil {
					t.Errorf("%s: %s.%s=%q: %v", name, what, k, v, err)
				}
			}
		}
		t.Logf("%s: %+v", name, req)
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestGatewayPatch: yaml/gateway-patch.yaml points the gateway at the
// Service the chart renders by default and removes faas-netes.
func TestGatewayPatch(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "yaml", "gateway-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name  string   `json:"name"`
						Patch string   `json:"$patch"`
						Env   []envVar `json:"env"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &patch); err != nil {
		t.Fatalf("yaml/gateway-patch.yaml: %v", err)
	}
	r := render(t)
	var svc service
	r.one(t, "Service", "faas-gpu").into(t, &svc)
	wantURL := fmt.Sprintf("http://faas-gpu.%s:%d/", namespace, svc.Spec.Ports[0].Port)
	var url string
	deleted := map[string]bool{}
	for _, c := range patch.Spec.Template.Spec.Containers {
		if c.Patch == "delete" {
			deleted[c.Name] = true
		}
		if c.Name == "gateway" {
			for _, e := range c.Env {
				if e.Name == "functions_provider_url" {
					url = e.Value
				}
			}
		}
	}
	if url != wantURL {
		t.Errorf("gateway patch: functions_provider_url=%q, want %q (the chart's Service; the trailing slash matters to the gateway)", url, wantURL)
	}
	if !deleted["faas-netes"] {
		t.Errorf("gateway patch does not remove the faas-netes container, which would manage the functions too")
	}
}

// schemaLeaves lists the values the schema describes: a leaf is a value
// whose schema has no fixed properties (free-form maps such as resources
// count as one value).
func schemaLeaves(s map[string]any, prefix string, out *[]string) {
	props, ok := s["properties"].(map[string]any)
	if !ok {
		*out = append(*out, prefix)
		return
	}
	for k, v := range props {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		schemaLeaves(v.(map[string]any), p, out)
	}
}

func lookupValue(v map[string]any, path string) (any, bool) {
	var cur any = v
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// valueLeaves lists values.yaml's keys down to maps the schema leaves open.
func valueLeaves(v map[string]any, schema map[string]any, prefix string, out *[]string) {
	for k, val := range v {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		sub, _ := schema["properties"].(map[string]any)
		ss, _ := sub[k].(map[string]any)
		if m, ok := val.(map[string]any); ok && ss != nil && ss["properties"] != nil {
			valueLeaves(m, ss, p, out)
			continue
		}
		*out = append(*out, p)
	}
}

// TestValuesDocumented: values.yaml, values.schema.json and the README's
// table list the same values.
func TestValuesDocumented(t *testing.T) {
	dir := filepath.Join(repoRoot(t), chartRel)
	var schema map[string]any
	sb, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sb, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	vb, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}

	var fromSchema, fromValues []string
	schemaLeaves(schema, "", &fromSchema)
	valueLeaves(values, schema, "", &fromValues)
	sort.Strings(fromSchema)
	sort.Strings(fromValues)
	if !slices.Equal(fromSchema, fromValues) {
		t.Errorf("values.yaml and values.schema.json disagree:\n values.yaml: %v\n schema:      %v", fromValues, fromSchema)
	}
	for _, p := range fromValues {
		if !strings.Contains(string(readme), "| `"+p+"` |") {
			t.Errorf("README.md's values table has no row for `%s`", p)
		}
		v, _ := lookupValue(values, p)
		def, _ := json.Marshal(v)
		if !strings.Contains(string(readme), "| `"+p+"` | `"+string(def)+"` |") {
			t.Errorf("README.md: the row of `%s` does not give its default `%s`", p, def)
		}
	}
}
