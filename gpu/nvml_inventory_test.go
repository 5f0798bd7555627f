package gpu

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestInventoryFromNodeGPUs(t *testing.T) {
	v100 := AgentGPU{UUID: "GPU-a", Index: 0, Product: V100Product, MemoryBytes: v100Memory, SMCount: 80}
	tests := []struct {
		name    string
		in      NodeGPUs
		wantErr string
		wantSMs []int
	}{
		{"reported SM count", NodeGPUs{GPUs: []AgentGPU{v100}}, "", []int{80}},
		{"SM count from the table", NodeGPUs{GPUs: []AgentGPU{{UUID: "GPU-b", Product: "NVIDIA L4", MemoryBytes: 24 << 30}}}, "", []int{58}},
		{"unknown product", NodeGPUs{GPUs: []AgentGPU{{UUID: "GPU-c", Index: 2, Product: "NVIDIA Future", MemoryBytes: 1 << 30}}}, `GPU 2 (GPU-c, "NVIDIA Future"): SM count unknown`, nil},
		{"no memory", NodeGPUs{GPUs: []AgentGPU{{UUID: "GPU-d", Product: V100Product}}}, "no UUID or memory", nil},
		{"UUID twice", NodeGPUs{GPUs: []AgentGPU{v100, v100}}, "listed twice", nil},
		{"MIG only", NodeGPUs{GPUs: []AgentGPU{{UUID: "GPU-e", Product: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 << 30, MIGEnabled: true}}}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := InventoryFromNodeGPUs("node-a", tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if inv.Source != SourceNVML || inv.Emulated {
				t.Fatalf("source %q emulated %v", inv.Source, inv.Emulated)
			}
			var sms []int
			for _, d := range inv.Devices() {
				sms = append(sms, d.SMCount)
			}
			if len(sms) != len(tt.wantSMs) {
				t.Fatalf("SM counts %v, want %v", sms, tt.wantSMs)
			}
			for i := range sms {
				if sms[i] != tt.wantSMs[i] {
					t.Fatalf("SM counts %v, want %v", sms, tt.wantSMs)
				}
			}
		})
	}
}

// Whatever the build (with cgo or without), NewNVML on a path with no
// library reads as "no discovery here", which serve falls back on.
func TestNewNVMLWithoutLibrary(t *testing.T) {
	_, err := NewNVML("n", "/nonexistent/libnvidia-ml.so.1").NodeGPUs()
	if !errors.Is(err, ErrNoDiscovery) {
		t.Fatalf("err = %v, want ErrNoDiscovery", err)
	}
}

// docs/agent.md documents the SM-count table; it must list every entry.
func TestAgentDocListsSMTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/agent.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range knownProducts {
		row := fmt.Sprintf("| %s | %d |", p.name, p.sms)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/agent.md lacks the row %q", row)
		}
	}
}
