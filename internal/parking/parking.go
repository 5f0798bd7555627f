// Package parking is the provider's side of the replica protocol's parked
// processes (docs/replica-protocol.md, "Parked processes: /_/gpu"), shared
// by both backends: which servers declare they speak it, how a parked
// process's answer is read, and the hand-over that gives one its GPU
// settings. What to park, and when, is the lifecycle core's.
package parking

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Env, "1", marks a process started parked.
const Env = "FAAS_GPU_PARKED"

// DeclareEnv, "1" in a function's environment or its image's, declares
// that its server speaks /_/gpu: it is parked by default, without
// com.openfaas.gpu.parked.
const DeclareEnv = "FAAS_GPU_PARKABLE"

// Path is where a parked process waits for its settings.
const Path = "/_/gpu"

// HandOverTimeout bounds a hand-over: the process loads its model in it.
const HandOverTimeout = 5 * time.Minute

// Wanted says whether spec's function is to be parked, as far as its spec
// and its server's declaration go: it asks (com.openfaas.gpu.parked, a
// count or auto), or does not say (the default, auto) and its server
// declares it speaks /_/gpu (Declares; imageEnv nil where the image
// cannot be read). Asking by default only what declares it keeps the
// first parked process's probe from invoking a handler that serves every
// path. Whether the backend can run it parked is the backend's.
func Wanted(spec scheduler.Function, imageEnv map[string]string) bool {
	if spec.Scale.Parked == 0 && !spec.Scale.ParkedAuto {
		return false
	}
	return !spec.Scale.ParkedDefault || Declares(spec.Deployment.EnvVars, imageEnv)
}

// LogRefusal says that a function's server showed it cannot be parked
// (Answer's refusal, or an exit before it waited): at warning level where
// the function asked, at info where it was only the default, since most
// servers do not speak the protocol. process names its parked process
// (a local process or a pod).
func LogRefusal(log *zap.Logger, spec scheduler.Function, process, answer string) {
	level := log.Info
	if spec.Scale.ParkedAsked() != "" {
		level = log.Warn
	}
	level("function's server does not take its GPU settings after its start (docs/replica-protocol.md, \"Parked processes\"): none parked",
		zap.String("function", spec.Name()), zap.String("namespace", spec.Namespace()), zap.String("process", process), zap.String("answer", answer))
}

// Declares reports whether a function's server declares that it speaks
// /_/gpu (DeclareEnv "1"): the function's own variable wins over its
// image's, as it does in the environment a replica starts with. imageEnv
// is nil where the image cannot be read (Kubernetes).
func Declares(fnEnv, imageEnv map[string]string) bool {
	if v, ok := fnEnv[DeclareEnv]; ok {
		return v == "1"
	}
	return imageEnv[DeclareEnv] == "1"
}

// StartEnv is a parked process's own environment, in every backend: its
// function's (lifecycle.FunctionEnv), Env, and CUDA_VISIBLE_DEVICES empty,
// so that a server that does not speak the protocol, parked by default,
// cannot reach a GPU at full SM before it is found out (Answer). None of
// the settings that place a replica: its hand-over brings them.
func StartEnv(spec scheduler.Function) []lifecycle.EnvVar {
	return append(lifecycle.FunctionEnv(spec), lifecycle.EnvVar{Name: Env, Value: "1"}, lifecycle.EnvVar{Name: "CUDA_VISIBLE_DEVICES"})
}

// Settings are the variables a hand-over sends: the rendered environment
// of the replica the process becomes (lifecycle.RenderEnv).
func Settings(vars []lifecycle.EnvVar) map[string]string {
	m := make(map[string]string, len(vars))
	for _, e := range vars {
		m[e.Name] = e.Value
	}
	return m
}

// Answer reads a parked process's answer to GET /_/gpu: ready when it
// says it waits for its settings ({"parked": true}, the protocol's
// answer); refused, with why, when it answers as a server that does not
// know the path (a 404, 405 or 501, or a 2xx that is not that answer),
// since one that does not take its settings after its start must not be
// handed a replica. Anything else (a 503 while it imports) is neither yet.
func Answer(status int, body []byte) (ready bool, refused string) {
	switch {
	case status >= 200 && status < 300:
		var says struct {
			Parked bool `json:"parked"`
		}
		if json.Unmarshal(body, &says) == nil && says.Parked {
			return true, ""
		}
		return false, fmt.Sprintf(`GET %s answered %d without {"parked": true}`, Path, status)
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed || status == http.StatusNotImplemented:
		return false, fmt.Sprintf("GET %s answered %d", Path, status)
	}
	return false, ""
}

// Probe asks the parked process at base (http://host:port) whether it
// waits for its settings, as Answer reads it; err when it did not answer
// (not started yet, say), which is neither ready nor refused.
func Probe(ctx context.Context, client *http.Client, base string) (ready bool, refused string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+Path, nil)
	if err != nil {
		return false, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, "", err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	ready, refused = Answer(resp.StatusCode, body)
	return ready, refused, nil
}

// HandOver gives the parked process at base the settings of the replica
// it becomes (POST /_/gpu) and returns once it serves with them; the
// process loads its model meanwhile, so ctx bounds a model's load.
func HandOver(ctx context.Context, client *http.Client, base string, settings map[string]string) error {
	body, err := json.Marshal(struct {
		Env map[string]string `json:"env"`
	}{settings})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+Path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("hand-over: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("hand-over: POST %s answered %d: %s", Path, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}
