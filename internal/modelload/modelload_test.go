package modelload

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    List
		wantErr bool
	}{
		{"names and load times", `{"models": [{"name": "a", "bytes": 9, "loadSeconds": 1.5}, {"name": "b"}]}`,
			List{Models: []string{"a", "b"}, LoadSeconds: map[string]float64{"a": 1.5}}, false},
		{"nameless entries and bad load times dropped", `{"models": [{"name": ""}, {"name": "a", "loadSeconds": -1}]}`,
			List{Models: []string{"a"}}, false},
		{"empty", `{"models": []}`, List{Models: []string{}}, false},
		{"not JSON", `nope`, List{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(strings.NewReader(tt.body))
			if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Decode = %+v, %v; want %+v (error: %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		want    []string
		wantErr error // nil: none expected, unless other
		other   bool  // some other error
		outcome string
	}{
		{"loaded", http.StatusOK, `{"models": [{"name": "own"}, {"name": "vgg16"}]}`, []string{"own", "vgg16"}, nil, false, scheduler.IdleLoadDone},
		{"no room", http.StatusInsufficientStorage, "full", nil, ErrNoRoom, false, scheduler.IdleLoadNoRoom},
		{"not spoken: 404", http.StatusNotFound, "", nil, ErrNotSpoken, false, scheduler.IdleLoadNotSpoken},
		{"not spoken: 405", http.StatusMethodNotAllowed, "", nil, ErrNotSpoken, false, scheduler.IdleLoadNotSpoken},
		{"not spoken: 501", http.StatusNotImplemented, "", nil, ErrNotSpoken, false, scheduler.IdleLoadNotSpoken},
		{"the replica's failure", http.StatusInternalServerError, "boom", nil, nil, true, scheduler.IdleLoadFailed},
		{"a 200 that is no list", http.StatusOK, "ok", nil, nil, true, scheduler.IdleLoadFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked Request
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != Path {
					t.Errorf("%s %s, want POST %s", r.Method, r.URL.Path, Path)
				}
				if err := json.NewDecoder(r.Body).Decode(&asked); err != nil {
					t.Error(err)
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			l, err := Load(context.Background(), srv.Client(), srv.URL+"/", "vgg16")
			if got := Outcome(err); got != tt.outcome {
				t.Errorf("Outcome = %q, want %q", got, tt.outcome)
			}
			if asked.Model != "vgg16" {
				t.Errorf("asked to load %q, want vgg16", asked.Model)
			}
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			case tt.other:
				if err == nil || errors.Is(err, ErrNoRoom) || errors.Is(err, ErrNotSpoken) {
					t.Fatalf("err = %v, want the replica's own", err)
				}
			default:
				if err != nil || !reflect.DeepEqual(l.Models, tt.want) {
					t.Fatalf("Load = %+v, %v; want %v", l, err, tt.want)
				}
			}
		})
	}
}
