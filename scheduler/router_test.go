package scheduler

import "testing"

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
		{"a miss goes to the replica holding fewest models", []Candidate{{ID: "a", Models: 3}, {ID: "b", Models: 1}, {ID: "c", InFlight: 1}}, 3, 1},
		{"empty", nil, 3, -1},
	}
	for _, tt := range tests {
		if got := LocalityAware(tt.cands, tt.bound); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestNextFor(t *testing.T) {
	queue := []Waiting{{1, "x"}, {2, "y"}, {3, "y"}, {4, "z"}}
	is := func(ms ...string) func(string) bool {
		return func(m string) bool {
			for _, x := range ms {
				if x == m {
					return true
				}
			}
			return false
		}
	}
	tests := []struct {
		name  string
		queue []Waiting
		v     QueueView
		want  int
	}{
		{"in order takes the head", queue, QueueView{Holds: is("y"), BusyHolder: is(), Bound: 2}, 0},
		{"out of order takes the oldest request whose model is held", queue, QueueView{Holds: is("y"), BusyHolder: is(), Bound: 2, OutOfOrder: true}, 1},
		{"nothing held: the head loads", queue, QueueView{Holds: is(), BusyHolder: is(), Bound: 2, OutOfOrder: true}, 0},
		{"the head waits for its busy holder; the next without one loads", queue, QueueView{Holds: is(), BusyHolder: is("x", "y"), Bound: 2, OutOfOrder: true}, 3},
		{"in order, a head waiting for its holder blocks the queue", queue, QueueView{Holds: is(), BusyHolder: is("x"), Bound: 2}, -1},
		{"past the bound a request loads its model elsewhere", queue, QueueView{Holds: is(), BusyHolder: is("x", "y", "z"), Bound: 1, OutOfOrder: true}, 2},
		{"empty", nil, QueueView{Holds: is(), BusyHolder: is(), Bound: 2, OutOfOrder: true}, -1},
	}
	for _, tt := range tests {
		if got := NextFor(tt.queue, tt.v); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}
