package lifecycle

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestOrderIsKeptAsFunctionsComeAndGo: the order kept without sorting is
// the sort by age, then key, whatever order functions arrive and leave in,
// ties included (it decides who is placed first).
func TestOrderIsKeptAsFunctionsComeAndGo(t *testing.T) {
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
			c := New(inventory(1, 1), nil, Options{})
			var names []string
			for i, age := range tc.ages {
				// Names run against arrival, so a tie is broken by name.
				name := "f" + strconv.Itoa(len(tc.ages)-i)
				names = append(names, name)
				if _, err := c.Deploy(fn(name, 1, 0, 0, 1), t0.Add(time.Duration(age)*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			gone := map[string]bool{}
			for _, i := range tc.leave {
				if _, err := c.Delete("openfaas-fn", names[i], t0); err != nil {
					t.Fatal(err)
				}
				gone[names[i]] = true
			}
			var want []string
			for i, n := range names {
				if !gone[n] {
					want = append(want, strconv.Itoa(tc.ages[i])+" "+n)
				}
			}
			slices.Sort(want) // ages are one digit: text order is age, then name
			var got []string
			for _, v := range c.Functions() {
				got = append(got, strconv.Itoa(int(v.CreatedAt.Sub(t0)/time.Second))+" "+v.Spec.Name())
			}
			if !slices.Equal(got, want) {
				t.Errorf("order %v, want %v", got, want)
			}
		})
	}
}
