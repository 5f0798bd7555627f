package local

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// An emulated worker's side of the protocol: a load takes its time beside
// the requests, and what no longer fits is refused, not evicted for.
func TestEmulatedWorkerTakesLoads(t *testing.T) {
	fits := func(m string) (time.Duration, func() ([]string, bool)) {
		return 10 * time.Millisecond, func() ([]string, bool) { return []string{"own", m}, true }
	}
	full := func(string) (time.Duration, func() ([]string, bool)) {
		return 0, func() ([]string, bool) { return []string{"own"}, false }
	}
	tests := []struct {
		name   string
		fill   func(string) (time.Duration, func() ([]string, bool))
		body   string
		status int
		models []string // listed after
	}{
		{name: "fits", fill: fits, body: `{"model": "vgg16"}`, status: http.StatusOK, models: []string{"own", "vgg16"}},
		{name: "no room", fill: full, body: `{"model": "vgg16"}`, status: http.StatusInsufficientStorage, models: []string{"own"}},
		{name: "no model named", fill: fits, body: `{}`, status: http.StatusBadRequest, models: []string{"own"}},
		{name: "takes no loads", body: `{"model": "vgg16"}`, status: http.StatusNotImplemented, models: []string{"own"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serve := func(string) Service { return Service{Outcome: "miss", Resident: []string{"own"}} }
			spec := ReplicaSpec{ID: "r1", Function: "fn", Emulation: Emulation{Model: "own", Serve: serve}, Fill: tt.fill}
			run := newEmulatedRunner(spec, func(string, string) {}, zap.NewNop())
			startRunner(t, run)
			defer run.Stop(context.Background())
			resp, err := http.Post(run.URL()+modelsPath, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := getModels(t, run.URL()); !reflect.DeepEqual(got, tt.models) {
				t.Errorf("listed after: %q, want %q", got, tt.models)
			}
		})
	}
}
