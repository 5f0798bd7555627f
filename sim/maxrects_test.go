package sim

import (
	"fmt"
	"testing"
)

func covered(b *maxRects) int {
	// Cells of the square inside some placed rectangle (at most once each
	// if rectangles never overlap).
	n := 0
	for x := range binSide {
		for y := range binSide {
			for _, r := range b.used {
				if x >= r.x && x < r.x+r.w && y >= r.y && y < r.y+r.h {
					n++
				}
			}
		}
	}
	return n
}

func TestMaxRectsPacksWithoutOverlap(t *testing.T) {
	tests := []struct {
		name   string
		pods   [][2]int // quota, SM
		placed int
	}{
		{"slide 18: 4 x (40, 12), 2 x (40, 24), 2 x (60, 50)", [][2]int{{40, 12}, {40, 12}, {40, 12}, {40, 12}, {40, 24}, {40, 24}, {60, 50}, {60, 50}}, 8},
		{"four quarters fill the square", [][2]int{{50, 50}, {50, 50}, {50, 50}, {50, 50}, {10, 10}}, 4},
		{"side by side in time", [][2]int{{30, 100}, {30, 100}, {30, 100}, {30, 100}}, 3},
		{"stacked in SM", [][2]int{{100, 25}, {100, 25}, {100, 25}, {100, 25}, {100, 1}}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newMaxRects()
			area, placed := 0, 0
			for i, p := range tt.pods {
				r, ok := b.find(p[0], p[1])
				if !ok {
					continue
				}
				b.place(fmt.Sprint(i), r)
				area += p[0] * p[1]
				placed++
			}
			if placed != tt.placed {
				t.Errorf("placed %d pods, want %d", placed, tt.placed)
			}
			if got := covered(b); got != area || b.area != area {
				t.Errorf("cells covered %d, area booked %d, want %d: rectangles overlap", got, b.area, area)
			}
			for _, f := range b.free {
				for _, u := range b.used {
					if f.intersects(u) {
						t.Errorf("free %v overlaps placed %v", f, u)
					}
				}
			}
		})
	}
}

func TestMaxRectsRemoveKeepsOthersInPlace(t *testing.T) {
	b := newMaxRects()
	for i := range 4 {
		r, _ := b.find(50, 50)
		b.place(fmt.Sprint(i), r)
	}
	if _, ok := b.find(50, 50); ok {
		t.Fatal("a full square has room")
	}
	kept := b.used["2"]
	b.remove("1")
	if b.used["2"] != kept || b.area != 3*2500 {
		t.Errorf("pod 2 moved to %v (was %v) or area %d", b.used["2"], kept, b.area)
	}
	r, ok := b.find(50, 50)
	if !ok {
		t.Fatal("the freed quarter is not found")
	}
	b.place("5", r)
	if covered(b) != 4*2500 {
		t.Error("the new pod overlaps")
	}
}
