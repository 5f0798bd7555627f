package gpu

import (
	"strings"
	"testing"
)

func TestInventoryCPUCores(t *testing.T) {
	tests := []struct {
		name    string
		node    string
		want    int
		wantErr string
	}{
		{name: "given", node: "- name: a\n  cpuCores: 64\n", want: 64},
		{name: "absent takes the DGX-1's", node: "- name: a\n", want: DefaultCPUCores},
		{name: "negative", node: "- name: a\n  cpuCores: -2\n", wantErr: `node "a": cpuCores`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "version: faas-gpu/v1\nnodes:\n" + tt.node + "  gpus: [{uuid: GPU-1, product: x, memory: 1Gi, smCount: 80}]\n"
			inv, err := ParseInventory([]byte(yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := inv.Nodes[0].Cores(); got != tt.want {
				t.Errorf("Cores() = %d, want %d", got, tt.want)
			}
		})
	}
}
