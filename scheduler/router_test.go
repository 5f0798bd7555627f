package scheduler

import "testing"

func TestLeastOutstanding(t *testing.T) {
	tests := []struct {
		cands []Candidate
		want  int
	}{
		{nil, -1},
		{[]Candidate{{ID: "a", InFlight: 3}, {ID: "b", InFlight: 1}, {ID: "c", InFlight: 2}}, 1},
		{[]Candidate{{ID: "b", InFlight: 1}, {ID: "a", InFlight: 1}}, 1},
		{[]Candidate{{ID: "a"}}, 0},
	}
	for _, tt := range tests {
		if got := LeastOutstanding(tt.cands); got != tt.want {
			t.Errorf("LeastOutstanding(%v) = %d, want %d", tt.cands, got, tt.want)
		}
	}
}

func TestLocalityAware(t *testing.T) {
	tests := []struct {
		name  string
		cands []Candidate
		bound int64
		want  int
	}{
		{"holder preferred over idle", []Candidate{{ID: "a", InFlight: 0}, {ID: "b", InFlight: 2, Holds: true}}, 3, 1},
		{"least loaded holder", []Candidate{{ID: "a", InFlight: 2, Holds: true}, {ID: "b", InFlight: 1, Holds: true}}, 3, 1},
		{"holders over the bound: least loaded of all", []Candidate{{ID: "a", InFlight: 0}, {ID: "b", InFlight: 3, Holds: true}}, 3, 0},
		{"nobody holds it", []Candidate{{ID: "a", InFlight: 1}, {ID: "b", InFlight: 0}}, 3, 1},
		{"empty", nil, 3, -1},
	}
	for _, tt := range tests {
		if got := LocalityAware(tt.cands, tt.bound); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}
