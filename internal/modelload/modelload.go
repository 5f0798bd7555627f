// Package modelload is the provider's side of the replica protocol's
// model list (docs/replica-protocol.md): how a replica's list of the
// models it holds is read, and the load the provider asks of a replica in
// its idle time (POST /_/models), shared by the proxy and both backends.
// Which model a replica loads, and when, is the lifecycle core's
// (lifecycle.LoadModel).
package modelload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
)

// Path is where a replica that speaks the protocol lists its models
// (GET) and takes a model to load (POST).
const Path = "/_/models"

// Timeout bounds one load: a large model read from a cold disk.
const Timeout = 5 * time.Minute

// ErrNotSpoken: the replica answered a load as a server that does not
// know it (404, 405 or 501); it is not asked again until it restarts.
var ErrNotSpoken = errors.New("the replica does not take model loads")

// ErrNoRoom: the replica has no room for the model without evicting
// one it holds (507), which a load in its idle time must not do.
var ErrNoRoom = errors.New("no room for the model without evicting another")

// List is a replica's answer: its models, most recently used first, and
// how long the last load of each took, where it says (seconds; nil: none).
type List struct {
	Models      []string
	LoadSeconds map[string]float64
}

// body is the JSON a replica answers GET and POST /_/models with.
type body struct {
	Models []struct {
		Name  string `json:"name"`
		Bytes int64  `json:"bytes"`
		// LoadSeconds is how long the replica's last load of the model
		// took; 0 or absent when it does not say.
		LoadSeconds float64 `json:"loadSeconds"`
	} `json:"models"`
}

// Decode reads a replica's list (at most 1 MiB). Entries without a name
// are dropped, and a load time that is not a positive finite number is
// a replica's bug, not a load.
func Decode(r io.Reader) (List, error) {
	var b body
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&b); err != nil {
		return List{}, fmt.Errorf("decode %s: %w", Path, err)
	}
	l := List{Models: make([]string, 0, len(b.Models))}
	for _, m := range b.Models {
		if m.Name == "" {
			continue
		}
		l.Models = append(l.Models, m.Name)
		if m.LoadSeconds > 0 && !math.IsInf(m.LoadSeconds, 0) {
			if l.LoadSeconds == nil {
				l.LoadSeconds = map[string]float64{}
			}
			l.LoadSeconds[m.Name] = m.LoadSeconds
		}
	}
	return l, nil
}

// Request is the JSON of a load: the model to load.
type Request struct {
	Model string `json:"model"`
}

// Load asks the replica at base (http://host:port) to load model while it
// serves, keeping what it holds, and returns its list once the model is
// in (the replica answers then). ErrNotSpoken and ErrNoRoom say why it
// did not; other errors are the replica's or the network's.
func Load(ctx context.Context, client *http.Client, base, model string) (List, error) {
	payload, err := json.Marshal(Request{Model: model})
	if err != nil {
		return List{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+Path, bytes.NewReader(payload))
	if err != nil {
		return List{}, fmt.Errorf("load request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return List{}, fmt.Errorf("load %s: %w", model, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		l, err := Decode(resp.Body)
		if err != nil {
			return List{}, fmt.Errorf("load %s: %w", model, err)
		}
		return l, nil
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return List{}, fmt.Errorf("load %s: POST %s answered %d: %w", model, Path, resp.StatusCode, ErrNotSpoken)
	case http.StatusInsufficientStorage:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return List{}, fmt.Errorf("load %s: %w: %s", model, ErrNoRoom, strings.TrimSpace(string(msg)))
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return List{}, fmt.Errorf("load %s: POST %s answered %d: %s", model, Path, resp.StatusCode, strings.TrimSpace(string(msg)))
}

// Outcome names what Load's err says for the provider's metrics
// (scheduler.Stats.IdleLoads).
func Outcome(err error) string {
	switch {
	case err == nil:
		return scheduler.IdleLoadDone
	case errors.Is(err, ErrNoRoom):
		return scheduler.IdleLoadNoRoom
	case errors.Is(err, ErrNotSpoken):
		return scheduler.IdleLoadNotSpoken
	}
	return scheduler.IdleLoadFailed
}

// client reaches replicas for the loads the provider asks of them; each
// ask's own context bounds it, and the replicas are few and asked rarely,
// so no connection is kept.
var client = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// Asked is how one ask ended, for the backend that made it.
type Asked struct {
	// List is the replica's list once it loaded the model (Loaded).
	List   List
	Loaded bool
	// NotSpoken: it does not take loads; ask it no more.
	NotSpoken bool
}

// Ask is both backends' ask of a load in idle time: Load at base, within
// Timeout of ctx, its outcome counted on stats and logged with the
// replica (or pod) who names.
func Ask(ctx context.Context, base, model string, stats *scheduler.StatsRecorder, log *zap.Logger, who zap.Field) Asked {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	l, err := Load(ctx, client, base, model)
	stats.IdleLoaded(Outcome(err))
	switch {
	case errors.Is(err, ErrNotSpoken):
		log.Info("replica takes no model loads in its idle time", who, zap.Error(err))
		return Asked{NotSpoken: true}
	case err != nil:
		log.Debug("model not loaded", who, zap.String("model", model), zap.Error(err))
		return Asked{}
	}
	log.Debug("model loaded in idle time", who, zap.String("model", model))
	return Asked{List: l, Loaded: true}
}
