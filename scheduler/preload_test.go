package scheduler

import (
	"reflect"
	"testing"

	"github.com/faas-gpu/faas-gpu/profiles"
)

func TestPlaceModels(t *testing.T) {
	const gib = 1 << 30
	model := func(name string, bytes int64, share float64) ModelShare {
		return ModelShare{Profile: &profiles.Profile{Model: name, ModelSizeBytes: bytes}, Share: share}
	}
	mix := []ModelShare{model("a", gib, 5), model("b", gib, 3), model("c", 2*gib, 1)}
	tests := []struct {
		name    string
		mix     []ModelShare
		holders []ModelHolder
		want    []ModelLoad
	}{
		{"the model nobody holds first, most requested among equals",
			mix, []ModelHolder{{Room: 4 * gib, Used: gib, Holds: []string{"a"}}},
			[]ModelLoad{{0, "b", gib}}},
		{"each holder takes another: a copy taken counts for the next",
			mix, []ModelHolder{{Room: 4 * gib, Used: gib, Holds: []string{"a"}}, {Room: 4 * gib, Used: gib, Holds: []string{"a"}}},
			[]ModelLoad{{0, "b", gib}, {1, "c", 2 * gib}}},
		{"a model being loaded counts as a copy, and its holder takes no other",
			mix, []ModelHolder{{Room: 4 * gib, Used: gib, Holds: []string{"a"}, Loading: "b"}, {Room: 4 * gib, Used: gib, Holds: []string{"a"}}},
			[]ModelLoad{{1, "c", 2 * gib}}},
		{"what does not fit the free room is passed over, nothing evicted",
			mix, []ModelHolder{{Room: 2 * gib, Used: gib, Holds: []string{"b"}}},
			[]ModelLoad{{0, "a", gib}}},
		{"no free room: nothing",
			mix, []ModelHolder{{Room: 2 * gib, Used: 2 * gib, Holds: []string{"a", "b"}}},
			nil},
		{"every model held once: the most requested gets a second copy",
			mix, []ModelHolder{{Room: 4 * gib, Used: 4 * gib, Holds: []string{"a", "b", "c"}}, {Room: 4 * gib, Used: 2 * gib, Holds: []string{"c"}}},
			[]ModelLoad{{1, "a", gib}}},
		{"holding all it could use: nothing",
			mix, []ModelHolder{{Room: 8 * gib, Used: 4 * gib, Holds: []string{"a", "b", "c"}}},
			nil},
		{"unrequested and unsized models are not planned",
			[]ModelShare{model("a", gib, 1), model("z", gib, 0), model("u", 0, 9), {Share: 4}},
			[]ModelHolder{{Room: 4 * gib}},
			[]ModelLoad{{0, "a", gib}}},
		{"no holders", mix, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PlaceModels(tt.mix, tt.holders, nil)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PlaceModels = %v, want %v", got, tt.want)
			}
		})
	}
}
