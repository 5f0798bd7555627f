package handlers

import (
	"fmt"
	"testing"
	"time"
)

func TestLoadBookCountsModelsAndLoads(t *testing.T) {
	tests := []struct {
		name       string
		models     []string // one request each
		loads      int
		want       string
		wantLoads  uint64
		wantModels int
	}{
		{"no X-Model: no mix", nil, 0, "map[]", 0, 0},
		{"requests by model", []string{"a", "b", "a"}, 2, "map[a:2 b:1]", 2, 2},
		{"a client naming a new model every time is bounded", manyModels(maxModelsCounted + 10), 0, "", 0, maxModelsCounted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewLoadBook()
			b.Request("ns", "zoo", time.Now())
			for _, m := range tt.models {
				b.RequestModel("ns", "zoo", m)
			}
			for range tt.loads {
				b.Loaded("ns", "zoo")
			}
			got, loads := b.Models("ns", "zoo")
			if tt.want != "" && fmt.Sprint(got) != tt.want || len(got) != tt.wantModels || loads != tt.wantLoads {
				t.Errorf("Models = %v (%d), %d loads; want %s (%d), %d", got, len(got), loads, tt.want, tt.wantModels, tt.wantLoads)
			}
			if got != nil {
				got["a"] = 99 // a copy: the book is not changed through it
				if again, _ := b.Models("ns", "zoo"); again["a"] == 99 {
					t.Error("Models handed out the book's own map")
				}
			}
		})
	}
	if m, l := NewLoadBook().Models("ns", "none"); m != nil || l != 0 {
		t.Errorf("an unknown function: %v, %d; want nothing", m, l)
	}
}

func manyModels(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m%d", i)
	}
	return out
}
