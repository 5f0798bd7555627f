package sim

import (
	"fmt"
	"testing"
)

func TestFifoTakeModel(t *testing.T) {
	// Requests 0..5 name models by their number's entry in models.
	models := []int32{7, 8, 7, 9, 7, 8}
	modelOf := func(n int32) int32 { return models[n] }
	tests := []struct {
		name       string
		queue      []int32
		k          int
		took, left string
	}{
		{"the oldest's model, the others keep their order", []int32{0, 1, 2, 3, 4, 5}, 8, "[0 2 4]", "[1 3 5]"},
		{"at most k", []int32{0, 1, 2, 3, 4, 5}, 2, "[0 2]", "[1 3 4 5]"},
		{"one model: the head, in order", []int32{1, 5}, 8, "[1 5]", "[]"},
		{"empty", nil, 8, "[]", "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fifo
			for _, n := range tt.queue {
				f.push(n)
			}
			took := f.takeModel(nil, tt.k, modelOf)
			left := f.take(nil, f.len())
			if fmt.Sprint(took) != tt.took && !(len(took) == 0 && tt.took == "[]") || fmt.Sprint(left) != tt.left && !(len(left) == 0 && tt.left == "[]") {
				t.Errorf("took %v, left %v; want %s, %s", took, left, tt.took, tt.left)
			}
		})
	}
}
