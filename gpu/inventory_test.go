package gpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseInventory(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		gpus    int
	}{
		{name: "two nodes", gpus: 3, yaml: `
version: faas-gpu/v1
nodes:
- name: a
  gpus:
  - {uuid: GPU-1, product: Tesla V100-SXM2-16GB, memory: 16Gi, smCount: 80}
  - {uuid: GPU-2, product: Tesla V100-SXM2-16GB, memory: 16Gi, smCount: 80}
- name: b
  gpus:
  - {uuid: GPU-3, index: 4, product: NVIDIA H200, memory: 141Gi, smCount: 132}
`},
		{name: "wrong version", wantErr: "version", yaml: "version: v0\nnodes: []\n"},
		{name: "no nodes", wantErr: "at least one node", yaml: "version: faas-gpu/v1\n"},
		{name: "unknown field", wantErr: "unknown field", yaml: "version: faas-gpu/v1\nnodez: []\n"},
		{name: "bad memory", wantErr: "memory", yaml: `
version: faas-gpu/v1
nodes:
- name: a
  gpus: [{uuid: GPU-1, product: x, memory: lots, smCount: 80}]
`},
		{name: "duplicate uuid", wantErr: "listed twice", yaml: `
version: faas-gpu/v1
nodes:
- name: a
  gpus: [{uuid: GPU-1, product: x, memory: 1Gi, smCount: 80}, {uuid: GPU-1, product: x, memory: 1Gi, smCount: 80}]
`},
		{name: "zero sms", wantErr: "smCount", yaml: `
version: faas-gpu/v1
nodes:
- name: a
  gpus: [{uuid: GPU-1, product: x, memory: 1Gi, smCount: 0}]
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := ParseInventory([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(inv.Devices()); got != tt.gpus {
				t.Fatalf("devices = %d, want %d", got, tt.gpus)
			}
		})
	}
}

func TestParseInventoryValues(t *testing.T) {
	inv, err := ParseInventory([]byte(`
version: faas-gpu/v1
nodes:
- name: b
  gpus: [{uuid: GPU-b, index: 3, product: NVIDIA H200, memory: 141Gi, smCount: 132}]
- name: a
  gpus: [{uuid: GPU-a, product: Tesla V100-SXM2-16GB, memory: 16Gi, smCount: 80}]
`))
	if err != nil {
		t.Fatal(err)
	}
	devs := inv.Devices()
	want := []Device{
		{UUID: "GPU-a", Node: "a", Index: 0, Product: V100Product, MemoryBytes: 16 << 30, SMCount: 80},
		{UUID: "GPU-b", Node: "b", Index: 3, Product: "NVIDIA H200", MemoryBytes: 141 << 30, SMCount: 132},
	}
	for i := range want {
		if devs[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, devs[i], want[i])
		}
	}
	if got := inv.LargestMemory(); got != 141<<30 {
		t.Errorf("LargestMemory = %d", got)
	}
}

func TestBuiltinInventory(t *testing.T) {
	inv := BuiltinInventory("box")
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	devs := inv.Devices()
	if len(devs) != 2 || devs[0].Product != V100Product || devs[0].MemoryBytes != 16<<30 || devs[0].SMCount != 80 {
		t.Fatalf("built-in = %+v", devs)
	}
	if !inv.Emulated || inv.Source != "built-in" {
		t.Fatalf("built-in must say it is emulated: %+v", inv)
	}
	if BuiltinInventory("box").Devices()[1].UUID != devs[1].UUID {
		t.Fatal("built-in UUIDs must be stable across calls")
	}
}

func TestLoadInventoryFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inv.yaml")
	if err := os.WriteFile(path, []byte("version: faas-gpu/v1\nnodes:\n- name: a\n  gpus: [{uuid: G, product: p, memory: 1Gi, smCount: 10}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := LoadInventoryFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Source != path {
		t.Fatalf("source = %q", inv.Source)
	}
	if _, err := LoadInventoryFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing file must fail")
	}
}

func TestMainProduct(t *testing.T) {
	dev := func(node, uuid, product string) Device {
		return Device{UUID: uuid, Node: node, Product: product, MemoryBytes: 1, SMCount: 1}
	}
	tests := []struct {
		name string
		inv  Inventory
		want string
	}{
		{"empty", Inventory{}, ""},
		{"most GPUs win", Inventory{Nodes: []Node{
			{Name: "a", GPUs: []Device{dev("a", "1", "T4")}},
			{Name: "b", GPUs: []Device{dev("b", "2", V100Product), dev("b", "3", V100Product)}},
		}}, V100Product},
		{"a tie goes to the name sorting first", Inventory{Nodes: []Node{
			{Name: "a", GPUs: []Device{dev("a", "1", "Z"), dev("a", "2", "A")}},
		}}, "A"},
	}
	for _, tt := range tests {
		if got := tt.inv.MainProduct(); got != tt.want {
			t.Errorf("%s: MainProduct = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSameGPUs(t *testing.T) {
	a := BuiltinInventory("n")
	b := BuiltinInventory("n")
	if !a.SameGPUs(b) {
		t.Fatal("two built-in inventories of one node differ")
	}
	b.Nodes[0].GPUs[0].MemoryBytes /= 2
	if a.SameGPUs(b) {
		t.Fatal("a GPU whose memory changed is the same")
	}
	c := a
	c.Nodes = nil
	if a.SameGPUs(c) || !c.SameGPUs(Inventory{Source: "other"}) {
		t.Fatal("an empty inventory compares wrong")
	}
}
