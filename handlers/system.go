package handlers

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
)

// ProviderName is what /system/info and faas-cli version report.
const ProviderName = "faas-gpu"

// MakeInfoHandler serves GET /system/info.
func MakeInfoHandler(orchestration, release, sha string) http.HandlerFunc {
	info := types.ProviderInfo{
		Name:          ProviderName,
		Orchestration: orchestration,
		Version:       &types.VersionInfo{Release: release, SHA: sha},
	}
	return func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, info)
	}
}

// MakeHealthHandler serves /healthz, which the gateway forwards and
// faas-cli ready polls.
func MakeHealthHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		w.WriteHeader(http.StatusOK)
	}
}

// GPUReporter describes the GPUs and what is placed on them.
type GPUReporter interface {
	GPUReport(ctx context.Context) (scheduler.ClusterReport, error)
}

// MeasuredLatencies is the proxy's view of each function's last minute
// (*ProxyMetrics).
type MeasuredLatencies interface {
	Measured(namespace, name string, slo time.Duration) (scheduler.MeasuredLatency, bool)
}

// MakeGPUsHandler serves GET /system/gpus, faas-gpu's extension. With
// measured (nil: none) each function that served requests in the last
// minute carries what the proxy measured of them.
func MakeGPUsHandler(b GPUReporter, measured MeasuredLatencies) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rep, err := b.GPUReport(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		if measured != nil {
			for i := range rep.Functions {
				f := &rep.Functions[i]
				// The report gives the SLO as the Duration's own String,
				// which parses back exactly.
				slo, _ := time.ParseDuration(f.SLO)
				if m, ok := measured.Measured(f.Namespace, f.Name, slo); ok {
					f.Measured = &m
				}
			}
		}
		writeJSON(w, http.StatusOK, rep)
	}
}

// MakeLogsHandler serves GET /system/logs. faas-provider's handler streams
// NDJSON; in front of it faas-gpu rejects a bad query with 400 naming the
// parameter, and an unknown function with 404, instead of a bare 422/500.
func MakeLogsHandler(b FunctionBackend, requester logs.Requester, timeout time.Duration) http.HandlerFunc {
	stream := logs.NewLogHandlerFunc(requester, timeout)
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		name := q.Get("name")
		if err := validateName("name", name); err != nil {
			writeError(w, err)
			return
		}
		ns, err := namespaceOf(r, "")
		if err != nil {
			writeError(w, err)
			return
		}
		if v := q.Get("tail"); v != "" {
			if _, err := strconv.Atoi(v); err != nil {
				writeError(w, badRequest("tail", "%q is not an integer", v))
				return
			}
		}
		if v := q.Get("follow"); v != "" {
			if _, err := strconv.ParseBool(v); err != nil {
				writeError(w, badRequest("follow", "%q is not true or false", v))
				return
			}
		}
		if v := q.Get("since"); v != "" {
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				writeError(w, badRequest("since", "%q is not an RFC 3339 time", v))
				return
			}
		}
		if _, err := b.Status(r.Context(), ns, name); err != nil {
			writeError(w, err)
			return
		}
		if q.Get("namespace") == "" {
			// faas-provider's parser reads the namespace from the query only.
			q.Set("namespace", ns)
			r.URL.RawQuery = q.Encode()
		}
		stream(w, r)
	}
}
