package profiler

import (
	"reflect"
	"strings"
	"testing"

	"github.com/openfaas/faas-provider/types"
)

func TestCopyName(t *testing.T) {
	tests := []struct {
		fn        string
		sm, batch int
		want      string // "" : an error
	}{
		{"resnet", 25, 1, "resnet-profile-25"},
		{"resnet", 100, 4, "resnet-profile-100-b4"},
		{strings.Repeat("a", 51), 100, 1, strings.Repeat("a", 51) + "-profile-100"},
		{strings.Repeat("a", 52), 100, 1, ""},
	}
	for _, tt := range tests {
		got, err := copyName(tt.fn, tt.sm, tt.batch)
		if tt.want == "" {
			if err == nil || !strings.Contains(err.Error(), "longer than 63") {
				t.Errorf("copyName(%s) = %q, %v; want a length error", tt.fn, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("copyName(%s, %d, %d) = %q, %v; want %q", tt.fn, tt.sm, tt.batch, got, err, tt.want)
		}
	}
}

func TestCopyDeployment(t *testing.T) {
	ptr := func(m map[string]string) *map[string]string { return &m }
	orig := types.FunctionStatus{
		Name: "resnet", Image: "ghcr.io/x/resnet:1", Namespace: "ml", EnvProcess: "python index.py",
		EnvVars:     map[string]string{"mode": "http", "FAAS_GPU_BATCH": "8"},
		Constraints: []string{"node.gpu=v100"}, Secrets: []string{"token"},
		Labels:                 ptr(map[string]string{"team": "vision", "com.openfaas.gpu.emulated": "true", "com.openfaas.scale.max": "10"}),
		Annotations:            ptr(map[string]string{"com.openfaas.gpu.memory": "2Gi", "com.openfaas.gpu.slo": "50ms", "com.openfaas.gpu.sm": "30", "com.openfaas.scale.min": "3"}),
		Limits:                 &types.FunctionResources{Memory: "1Gi", NvidiaGPU: "1"},
		Requests:               &types.FunctionResources{NvidiaGPU: "1"},
		ReadOnlyRootFilesystem: true, AvailableReplicas: 3,
	}
	got := copyDeployment(orig, "resnet-profile-25", 25, 2)
	want := types.FunctionDeployment{
		Service: "resnet-profile-25", Image: "ghcr.io/x/resnet:1", Namespace: "ml", EnvProcess: "python index.py",
		EnvVars:     map[string]string{"mode": "http", "FAAS_GPU_BATCH": "2"},
		Constraints: []string{"node.gpu=v100"}, Secrets: []string{"token"},
		Labels: ptr(map[string]string{"team": "vision", LabelCopyOf: "resnet",
			"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1", "com.openfaas.scale.zero": "false"}),
		Annotations: ptr(map[string]string{"com.openfaas.gpu.memory": "2Gi", "com.openfaas.gpu.sm": "25", "com.openfaas.gpu.model": "resnet",
			"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1", "com.openfaas.scale.zero": "false"}),
		Limits:                 &types.FunctionResources{Memory: "1Gi"},
		ReadOnlyRootFilesystem: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("copy:\n%#v\nwant\n%#v", got, want)
	}
	if orig.EnvVars["FAAS_GPU_BATCH"] != "8" || (*orig.Annotations)["com.openfaas.gpu.sm"] != "30" || orig.Limits.NvidiaGPU != "1" {
		t.Fatal("the original's maps were changed")
	}
	if !isCopyOf(types.FunctionStatus{Labels: got.Labels}, "resnet") || isCopyOf(orig, "resnet") {
		t.Fatal("isCopyOf does not tell the copy from the original")
	}
}

func TestModelOf(t *testing.T) {
	withModel := map[string]string{"com.openfaas.gpu.model": "resnet50"}
	if got := ModelOf(types.FunctionStatus{Name: "fn", Annotations: &withModel}); got != "resnet50" {
		t.Errorf("ModelOf = %q, want the annotation", got)
	}
	if got := ModelOf(types.FunctionStatus{Name: "fn"}); got != "fn" {
		t.Errorf("ModelOf = %q, want the name", got)
	}
}
