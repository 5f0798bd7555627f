package cache

import (
	"testing"
	"time"
)

// A model the node's store holds is on the node long after any TTL, and
// past the LRU bound; once the report leaves it out, only a recent load
// counts again.
func TestNodeStoreNeverExpires(t *testing.T) {
	c := New(Options{NodeModels: 1, NodeTTL: time.Minute})
	c.SetNodeStore("n0", []string{"resnet50", "vgg16"})
	late := t0.Add(48 * time.Hour)
	tests := []struct {
		name, node, model string
		at                time.Time
		want              bool
	}{
		{"in store, long after the TTL", "n0", "resnet50", late, true},
		{"second store model, past the LRU bound of 1", "n0", "vgg16", late, true},
		{"not in store", "n0", "bert", late, false},
		{"other node", "n1", "resnet50", late, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.OnNode(tt.node, tt.model, tt.at); got != tt.want {
				t.Fatalf("OnNode(%s, %s) = %v, want %v", tt.node, tt.model, got, tt.want)
			}
			if got := c.Where(tt.model, tt.at).Nodes[tt.node]; got != tt.want {
				t.Fatalf("Where(%s).Nodes[%s] = %v, want %v", tt.model, tt.node, got, tt.want)
			}
		})
	}

	// A replica loading a store model is a node hit, not a miss.
	c.AddReplica("r1", "g0", "n0", 10)
	if o := c.Preload("r1", "vgg16", 1, late); o != NodeHit {
		t.Fatalf("load of a store model: %v, want node-hit", o)
	}

	// The store no longer holds resnet50: back to the time guess, and it
	// was never loaded here, so it is not on the node.
	c.SetNodeStore("n0", []string{"vgg16"})
	if c.OnNode("n0", "resnet50", late) {
		t.Fatal("resnet50 still on n0 after the store dropped it")
	}
	c.SetNodeStore("n0", nil)
	if c.OnNode("n0", "vgg16", late.Add(time.Hour)) {
		t.Fatal("vgg16 on n0 an hour after its load and with no store")
	}
}
