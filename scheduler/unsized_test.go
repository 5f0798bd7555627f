package scheduler

import (
	"slices"
	"testing"
	"time"
)

// A scale-up replaces replicas given their slice before the load was
// known (Unsized), ready or placed within RestartWithin, where one pool
// sized for the demand costs less than keeping them and adding beside
// them; a sized replica, one starting for longer, or a tentative
// scale-up keeps them.
func TestAutoscaleReplacesUnsized(t *testing.T) {
	const mem = 15 // a replica's memory, % of a GPU: a 10 % slice costs 15
	unsized := func(id string, c SliceConfig, startedFor time.Duration, starting bool) ReplicaCapacity {
		return ReplicaCapacity{ID: id, Config: c, Unsized: true, Starting: starting, StartedFor: startedFor}
	}
	tests := []struct {
		name    string
		in      AutoscaleInput
		replace []string
		add     []SliceConfig
	}{
		// 40 req/s x 1.2 = 48: 10 % (40) + 10 % costs 30, one 20 % (60) 20.
		{"ready", AutoscaleInput{Rate: 40, Replicas: []ReplicaCapacity{unsized("a", configs[0], 0, false)}},
			[]string{"a"}, []SliceConfig{configs[1]}},
		{"starting, placed 2 s ago", AutoscaleInput{Rate: 40, Replicas: []ReplicaCapacity{unsized("a", configs[0], 2*time.Second, true)}},
			[]string{"a"}, []SliceConfig{configs[1]}},
		{"pending", AutoscaleInput{Rate: 40, Replicas: []ReplicaCapacity{unsized("a", configs[0], 0, true)}},
			[]string{"a"}, []SliceConfig{configs[1]}},
		{"starting for longer than RestartWithin", AutoscaleInput{Rate: 40, Replicas: []ReplicaCapacity{unsized("a", configs[0], RestartWithin+time.Second, true)}},
			nil, []SliceConfig{configs[0]}},
		{"sized", AutoscaleInput{Rate: 40, Replicas: replicas(configs[0])},
			nil, []SliceConfig{configs[0]}},
		// Only a rise seen once asks for more: adds only where room is.
		{"tentative", AutoscaleInput{Rate: 20, Rising: 40, Replicas: []ReplicaCapacity{unsized("a", configs[0], 0, false)}},
			nil, []SliceConfig{configs[0]}},
		// 90 x 1.2 = 108: a (40) and b (60) + 10 % cost 50; b + 20 % 40.
		{"one of two", AutoscaleInput{Rate: 90, Replicas: []ReplicaCapacity{unsized("a", configs[0], 0, false), {ID: "b", Config: configs[1]}}},
			[]string{"a"}, []SliceConfig{configs[1]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.Now, in.Configs, in.MemoryPercent, in.Policy = t0, configs, mem, ScalePolicy{Min: 1, Max: 10}
			d := Autoscale(in, DefaultAutoscaleOptions)
			if !slices.Equal(d.Replace, tt.replace) || !slices.Equal(d.Add, tt.add) {
				t.Errorf("replace %v add %v, want replace %v add %v (%s)", d.Replace, d.Add, tt.replace, tt.add, d.Reason)
			}
		})
	}
}
