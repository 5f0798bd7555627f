package local

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestFunctionOrderIsKeptAsFunctionsComeAndGo: the order kept without
// sorting is the sort by age, then name, whatever order functions arrive
// and leave in, ties included.
func TestFunctionOrderIsKeptAsFunctionsComeAndGo(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		ages  []int // createdAt offsets in seconds, in arrival order
		leave []int // indexes into ages, removed in this order
	}{
		{name: "in order", ages: []int{0, 1, 2, 3}, leave: []int{1}},
		{name: "out of order", ages: []int{3, 0, 2, 1}, leave: []int{0, 3}},
		{name: "ties", ages: []int{1, 1, 0, 1, 0}, leave: []int{3, 2}},
		{name: "all leave", ages: []int{2, 2, 1}, leave: []int{2, 0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &Backend{functions: map[string]*function{}}
			var fns []*function
			for i, age := range tc.ages {
				// Names run against arrival, so a tie is broken by name.
				fn := &function{spec: fnSpec("f"+strconv.Itoa(len(tc.ages)-i), 10, 1<<30), createdAt: t0.Add(time.Duration(age) * time.Second)}
				fns = append(fns, fn)
				b.addLocked(fn)
			}
			left := map[*function]bool{}
			for _, i := range tc.leave {
				b.removeLocked(fns[i])
				left[fns[i]] = true
			}
			var want []*function
			for _, fn := range fns {
				if !left[fn] {
					want = append(want, fn)
				}
			}
			slices.SortFunc(want, func(a, c *function) int {
				switch {
				case olderThan(a, c):
					return -1
				case olderThan(c, a):
					return 1
				}
				return 0
			})
			if got := b.sortedFunctionsLocked(); !slices.Equal(got, want) {
				t.Errorf("order %v, want %v", namesOf(got), namesOf(want))
			}
			if len(b.functions) != len(want) {
				t.Errorf("%d functions registered, want %d", len(b.functions), len(want))
			}
		})
	}
}

func namesOf(fns []*function) []string {
	out := make([]string, len(fns))
	for i, fn := range fns {
		out[i] = fn.spec.Name()
	}
	return out
}
