package gpu

import (
	"reflect"
	"strings"
	"testing"
)

func TestNodeGPUsRoundTrip(t *testing.T) {
	in := NodeGPUs{
		Source:       "nvml",
		GPUs:         []AgentGPU{{UUID: "GPU-a", Index: 0, Product: "NVIDIA H200", MemoryBytes: 1 << 30, SMCount: 132}},
		Models:       []string{"resnet50", "vgg16"},
		Placeholders: []PodDevices{{Pod: "openfaas/faas-gpu-reserve-1", Devices: []string{"GPU-a"}}},
		Claims:       []PodDevices{{Pod: "ml/trainer", Devices: []string{"GPU-b"}}},
	}
	v, err := EncodeNodeGPUs(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNodeGPUs("n1", v)
	if err != nil {
		t.Fatal(err)
	}
	in.Version = NodeGPUsVersion
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
	}
}

// An older agent's annotation (no models, no placeholders) still reads,
// and a newer field an older provider does not know is ignored: the format
// only grows.
func TestParseNodeGPUsAdditive(t *testing.T) {
	tests := []struct {
		name, value string
		models      []string
		holders     int
		wantErr     string
	}{
		{"older agent", `{"version":"faas-gpu/v1","source":"nvml","gpus":[]}`, nil, 0, ""},
		{"store and placeholders", `{"version":"faas-gpu/v1","gpus":[],"models":["m"],"placeholders":[{"pod":"ns/p","devices":["GPU-1"]}]}`, []string{"m"}, 1, ""},
		{"unknown later field", `{"version":"faas-gpu/v1","gpus":[],"somethingNew":1}`, nil, 0, ""},
		{"bad pod", `{"version":"faas-gpu/v1","gpus":[],"claims":[{"pod":"p","devices":["GPU-1"]}]}`, nil, 0, `pod "p" is not namespace/name`},
		{"other version", `{"version":"faas-gpu/v2","gpus":[]}`, nil, 0, `version "faas-gpu/v2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseNodeGPUs("n1", tt.value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(n.Models, tt.models) || len(n.Placeholders) != tt.holders {
				t.Fatalf("models %v placeholders %v", n.Models, n.Placeholders)
			}
		})
	}
}
