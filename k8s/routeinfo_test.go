package k8s

import (
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"k8s.io/client-go/tools/cache"
)

// A standby answers the proxy's per-request lookup from the function's
// record decoded once, when the informer delivered it: no lock, no JSON
// decoding per request (it used to decode the Service's annotation on
// every request), and a record gone is a function gone.
func TestStandbyDecodesARecordOnce(t *testing.T) {
	spec := scheduler.Function{
		Deployment: types.FunctionDeployment{Service: "ocr", Namespace: "openfaas-fn", Image: "img"},
		GPU:        gpu.Request{Model: "tesseract", SLO: 80 * time.Millisecond, SMPercent: 20},
		Scale:      scheduler.ScalePolicy{Min: 1, Max: 2},
	}
	svc, err := renderRecord(spec, 1, 8080)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{} // a standby: no state of its own
	if _, err := b.functionRequest("openfaas-fn", "ocr"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("before the record: %v, want not found", err)
	}
	b.recordSeen(svc)
	req, err := b.functionRequest("openfaas-fn", "ocr")
	if err != nil || req.SLO != 80*time.Millisecond || req.Model != "tesseract" {
		t.Fatalf("after the record: %+v, %v", req, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = b.functionRequest("openfaas-fn", "ocr") }); n > 1 {
		t.Errorf("a lookup allocates %.0f times: the record is decoded per request", n)
	}
	b.recordGone(cache.DeletedFinalStateUnknown{Key: "openfaas-fn/ocr", Obj: svc})
	if _, err := b.functionRequest("openfaas-fn", "ocr"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the record went: %v, want not found", err)
	}
}
