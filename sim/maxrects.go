package sim

import "slices"

// rect is an axis-aligned rectangle of a GPU's quota (x) x SM (y) square.
type rect struct{ x, y, w, h int }

func (r rect) contains(o rect) bool {
	return o.x >= r.x && o.y >= r.y && o.x+o.w <= r.x+r.w && o.y+o.h <= r.y+r.h
}

func (r rect) intersects(o rect) bool {
	return o.x < r.x+r.w && o.x+o.w > r.x && o.y < r.y+r.h && o.y+o.h > r.y
}

// maxRects is FaST-GShare's node/GPU packing (slide 13; research notes
// §1.5): one GPU is a 2-D bin, time quota 0-100 % along x and SM
// partition 0-100 % along y, and a pod is a q x s rectangle in it. Pods
// stacked along SM run at the same time; pods side by side along quota take
// turns, which is exactly what the token scheduler can honour. Free space
// is the list of maximal free rectangles (Jylänki's MAXRECTS): placing a
// pod splits every free rectangle it overlaps into up to four maximal ones
// and drops the free rectangles another contains. The slides leave the
// choice heuristic open; this uses best long side fit (then best short
// side, then the lowest, leftmost position), which packs slide 18's eight
// pods into one GPU as the slides report; best area fit, best short side
// fit and bottom-left, given the pods in the slide's order, fit only seven.
// Removal is the slides' "keep-restructure": placed pods keep their
// positions and the free list is rebuilt around them.
type maxRects struct {
	free  []rect
	used  map[string]rect
	order []string // placement order, for a deterministic rebuild
	area  int
}

const binSide = 100

func newMaxRects() *maxRects {
	return &maxRects{free: []rect{{0, 0, binSide, binSide}}, used: map[string]rect{}}
}

// find returns where a w x h pod would go, by best long side fit.
func (b *maxRects) find(w, h int) (rect, bool) {
	best, found := rect{}, false
	bestLong, bestShort := 0, 0
	for _, f := range b.free {
		if w > f.w || h > f.h {
			continue
		}
		long, short := max(f.w-w, f.h-h), min(f.w-w, f.h-h)
		better := !found || long < bestLong ||
			long == bestLong && (short < bestShort || short == bestShort && (f.y < best.y || f.y == best.y && f.x < best.x))
		if better {
			best, found, bestLong, bestShort = rect{f.x, f.y, w, h}, true, long, short
		}
	}
	return best, found
}

// place books r for id (r as find returned it).
func (b *maxRects) place(id string, r rect) {
	b.used[id] = r
	b.order = append(b.order, id)
	b.area += r.w * r.h
	b.cut(r)
}

func (b *maxRects) cut(used rect) {
	var next []rect
	for _, f := range b.free {
		if !f.intersects(used) {
			next = append(next, f)
			continue
		}
		if used.x < f.x+f.w && used.x+used.w > f.x {
			if used.y > f.y {
				next = append(next, rect{f.x, f.y, f.w, used.y - f.y})
			}
			if used.y+used.h < f.y+f.h {
				next = append(next, rect{f.x, used.y + used.h, f.w, f.y + f.h - used.y - used.h})
			}
		}
		if used.y < f.y+f.h && used.y+used.h > f.y {
			if used.x > f.x {
				next = append(next, rect{f.x, f.y, used.x - f.x, f.h})
			}
			if used.x+used.w < f.x+f.w {
				next = append(next, rect{used.x + used.w, f.y, f.x + f.w - used.x - used.w, f.h})
			}
		}
	}
	// Drop rectangles contained in another (of two equal, the later).
	b.free = b.free[:0]
	for i, r := range next {
		redundant := false
		for j, o := range next {
			if i != j && o.contains(r) && (r != o || j < i) {
				redundant = true
				break
			}
		}
		if !redundant {
			b.free = append(b.free, r)
		}
	}
}

// remove frees id's rectangle, keeping the others where they are.
func (b *maxRects) remove(id string) {
	r, ok := b.used[id]
	if !ok {
		return
	}
	delete(b.used, id)
	b.area -= r.w * r.h
	b.order = slices.DeleteFunc(b.order, func(s string) bool { return s == id })
	b.free = []rect{{0, 0, binSide, binSide}}
	for _, u := range b.order {
		b.cut(b.used[u])
	}
}
