package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/gorilla/mux"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
)

// FunctionBackend deploys and runs functions. Not-found errors wrap
// fs.ErrNotExist, duplicates fs.ErrExist, bad input is a *gpu.FieldError.
type FunctionBackend interface {
	Deploy(ctx context.Context, fn scheduler.Function) error
	Update(ctx context.Context, fn scheduler.Function) error
	Delete(ctx context.Context, namespace, name string) error
	List(ctx context.Context, namespace string) ([]types.FunctionStatus, error)
	Status(ctx context.Context, namespace, name string) (types.FunctionStatus, error)
	// Scale sets the desired replica count; status shows it at once.
	Scale(ctx context.Context, namespace, name string, replicas int) error
}

// MakeListHandler serves GET /system/functions.
func MakeListHandler(b FunctionBackend, inv *Invocations) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns, err := namespaceOf(r, "")
		if err != nil {
			writeError(w, err)
			return
		}
		fns, err := b.List(r.Context(), ns)
		if err != nil {
			writeError(w, err)
			return
		}
		if fns == nil {
			fns = []types.FunctionStatus{}
		}
		for i := range fns {
			fns[i].InvocationCount = inv.Count(fns[i].Namespace, fns[i].Name)
		}
		writeJSON(w, http.StatusOK, fns)
	}
}

// MakeStatusHandler serves GET /system/function/{name}.
func MakeStatusHandler(b FunctionBackend, inv *Invocations) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := mux.Vars(r)["name"]
		ns, err := namespaceOf(r, "")
		if err != nil {
			writeError(w, err)
			return
		}
		st, err := b.Status(r.Context(), ns, name)
		if err != nil {
			writeError(w, err)
			return
		}
		st.InvocationCount = inv.Count(st.Namespace, st.Name)
		writeJSON(w, http.StatusOK, st)
	}
}

// MakeDeployHandler serves POST /system/functions.
func MakeDeployHandler(b FunctionBackend, log *zap.Logger) http.HandlerFunc {
	return makeDeployOrUpdate(b.Deploy, "deploy", log)
}

// MakeUpdateHandler serves PUT /system/functions; faas-cli falls back to a
// POST when this answers 404.
func MakeUpdateHandler(b FunctionBackend, log *zap.Logger) http.HandlerFunc {
	return makeDeployOrUpdate(b.Update, "update", log)
}

func makeDeployOrUpdate(apply func(context.Context, scheduler.Function) error, verb string, log *zap.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var dep types.FunctionDeployment
		if err := decodeBody(w, r, &dep); err != nil {
			writeError(w, err)
			return
		}
		ns, err := namespaceOf(r, dep.Namespace)
		if err != nil {
			writeError(w, err)
			return
		}
		dep.Namespace = ns
		fn, err := validateDeployment(dep)
		if err != nil {
			writeError(w, err)
			return
		}
		if err := apply(r.Context(), fn); err != nil {
			log.Info(verb+" refused", zap.String("function", dep.Service), zap.String("namespace", ns), zap.Error(err))
			writeError(w, err)
			return
		}
		log.Info(verb, zap.String("function", dep.Service), zap.String("namespace", ns), zap.String("image", dep.Image))
		w.WriteHeader(http.StatusAccepted)
	}
}

// Forgetter drops what it keeps per function (invocation counts, metric
// series) once the function is deleted.
type Forgetter interface {
	Forget(namespace, name string)
}

// MakeDeleteHandler serves DELETE /system/functions. faas-cli sends the
// namespace in the body, the UI in the query string. Once the backend has
// deleted the function, each of forget drops what it kept of it: the
// handler is where the provider learns of the delete, so it is the one
// place that tells them.
func MakeDeleteHandler(b FunctionBackend, log *zap.Logger, forget ...Forgetter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req types.DeleteFunctionRequest
		if err := decodeBody(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		if err := validateName("functionName", req.FunctionName); err != nil {
			writeError(w, err)
			return
		}
		ns, err := namespaceOf(r, req.Namespace)
		if err != nil {
			writeError(w, err)
			return
		}
		if err := b.Delete(r.Context(), ns, req.FunctionName); err != nil {
			writeError(w, err)
			return
		}
		for _, f := range forget {
			f.Forget(ns, req.FunctionName)
		}
		log.Info("delete", zap.String("function", req.FunctionName), zap.String("namespace", ns))
		w.WriteHeader(http.StatusAccepted)
	}
}

// MakeScaleHandler serves POST /system/scale-function/{name}. The gateway's
// scale-from-zero puts the namespace in the query and none in the body.
func MakeScaleHandler(b FunctionBackend, log *zap.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := mux.Vars(r)["name"]
		var req types.ScaleServiceRequest
		if err := decodeBody(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		if req.ServiceName != "" && req.ServiceName != name {
			writeError(w, badRequest("serviceName", "%q does not match the path's %q", req.ServiceName, name))
			return
		}
		ns, err := namespaceOf(r, req.Namespace)
		if err != nil {
			writeError(w, err)
			return
		}
		const maxReplicas = 1000
		if req.Replicas > maxReplicas {
			writeError(w, badRequest("replicas", "%d is above the limit of %d", req.Replicas, maxReplicas))
			return
		}
		if err := b.Scale(r.Context(), ns, name, int(req.Replicas)); err != nil {
			writeError(w, err)
			return
		}
		log.Info("scale", zap.String("function", name), zap.String("namespace", ns), zap.Uint64("replicas", req.Replicas))
		w.WriteHeader(http.StatusAccepted)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
