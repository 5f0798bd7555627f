package parking

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// What a parked process's answer to GET /_/gpu says: only the protocol's
// answer is a process waiting; an answer a server gives a path it does not
// know is a refusal; anything else (it is still importing) is neither yet.
func TestAnswer(t *testing.T) {
	tests := []struct {
		status      int
		body        string
		ready, refd bool
	}{
		{200, `{"parked": true}`, true, false},
		{204, `{"parked":true}`, true, false},
		{200, `{"parked": false}`, false, true},
		{200, `hello from the handler`, false, true},
		{404, `404 page not found`, false, true},
		{405, ``, false, true},
		{501, ``, false, true},
		{503, `parked: waiting`, false, false},
		{500, `boom`, false, false},
	}
	for _, tt := range tests {
		ready, why := Answer(tt.status, []byte(tt.body))
		if ready != tt.ready || (why != "") != tt.refd {
			t.Errorf("%d %q: ready %v, refused %q; want ready %v, refused %v", tt.status, tt.body, ready, why, tt.ready, tt.refd)
		}
	}
}

// The declaration that a server can be parked follows the environment a
// replica starts with: the function's own variable wins over its image's.
func TestDeclares(t *testing.T) {
	tests := []struct {
		name          string
		fnEnv, imgEnv map[string]string
		want          bool
	}{
		{"neither", nil, nil, false},
		{"the image", nil, map[string]string{DeclareEnv: "1"}, true},
		{"the function", map[string]string{DeclareEnv: "1"}, nil, true},
		{"the function turns the image's off", map[string]string{DeclareEnv: "0"}, map[string]string{DeclareEnv: "1"}, false},
		{"the function turns it on over the image's off", map[string]string{DeclareEnv: "1"}, map[string]string{DeclareEnv: "0"}, true},
		{"only 1 declares", nil, map[string]string{DeclareEnv: "true"}, false},
	}
	for _, tt := range tests {
		if got := Declares(tt.fnEnv, tt.imgEnv); got != tt.want {
			t.Errorf("%s: Declares = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Probe and HandOver over real HTTP: a parked server says it waits, takes
// its settings once, and is then no longer parked; one that does not know
// the path is a refusal; no answer is neither.
func TestProbeAndHandOver(t *testing.T) {
	var mu sync.Mutex
	var handed map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path != Path || handed != nil:
			http.NotFound(w, r)
		case r.Method == http.MethodGet:
			_, _ = w.Write([]byte(`{"parked": true}`))
		case r.Method == http.MethodPost:
			var body struct {
				Env map[string]string `json:"env"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Env["CUDA_VISIBLE_DEVICES"] == "" {
				http.Error(w, "no GPU in the settings", http.StatusBadRequest)
				return
			}
			handed = body.Env
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	ready, refused, err := Probe(ctx, srv.Client(), srv.URL)
	if !ready || refused != "" || err != nil {
		t.Fatalf("parked: ready %v, refused %q, err %v", ready, refused, err)
	}
	if err := HandOver(ctx, srv.Client(), srv.URL, map[string]string{"FAAS_GPU_MODEL": "m"}); err == nil || !strings.Contains(err.Error(), "no GPU in the settings") {
		t.Errorf("a refused hand-over: %v; want the server's reason", err)
	}
	if err := HandOver(ctx, srv.Client(), srv.URL, map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := handed["CUDA_VISIBLE_DEVICES"]
	mu.Unlock()
	if got != "GPU-a" {
		t.Errorf("settings taken %q, want GPU-a", got)
	}
	ready, refused, err = Probe(ctx, srv.Client(), srv.URL)
	if ready || refused == "" || err != nil {
		t.Errorf("handed over: ready %v, refused %q, err %v; want a 404, as a server not parked answers", ready, refused, err)
	}
	srv.Close()
	if ready, refused, err := Probe(ctx, http.DefaultClient, srv.URL); ready || refused != "" || err == nil {
		t.Errorf("no server: ready %v, refused %q, err %v; want neither, with the error", ready, refused, err)
	}
}

// A function is parked where it asks, or by default where its server
// declares it; "0" parks none, whatever is declared.
func TestWanted(t *testing.T) {
	tests := []struct {
		name       string
		ann, fnEnv map[string]string
		imgEnv     map[string]string
		want       bool
	}{
		{"asks a count", map[string]string{scheduler.AnnotationParked: "1"}, nil, nil, true},
		{"asks auto", map[string]string{scheduler.AnnotationParked: "auto"}, nil, nil, true},
		{"asks none over a declaration", map[string]string{scheduler.AnnotationParked: "0"}, map[string]string{DeclareEnv: "1"}, nil, false},
		{"default, the function declares", nil, map[string]string{DeclareEnv: "1"}, nil, true},
		{"default, the image declares", nil, nil, map[string]string{DeclareEnv: "1"}, true},
		{"default, nothing declared", nil, nil, nil, false},
	}
	for _, tt := range tests {
		pol, err := scheduler.ParseScalePolicy(nil, tt.ann)
		if err != nil {
			t.Fatal(err)
		}
		spec := scheduler.Function{Scale: pol}
		spec.Deployment.EnvVars = tt.fnEnv
		if got := Wanted(spec, tt.imgEnv); got != tt.want {
			t.Errorf("%s: Wanted = %v, want %v", tt.name, got, tt.want)
		}
	}
}
