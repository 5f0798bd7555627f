package k8s

import (
	"reflect"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
)

// What the proxy counted of a multi-model function's mix reaches the
// core's load on Kubernetes as in local mode: requests by model and the
// loads its pods reported.
func TestObserveCarriesTheModelMix(t *testing.T) {
	b := fakeBackend(t)
	book := handlers.NewLoadBook()
	b.cfg.Load = book
	now := time.Now()
	for _, m := range []string{"a", "b", "a"} {
		book.Request("ns", "zoo", now)
		book.RequestModel("ns", "zoo", m)
	}
	book.Loaded("ns", "zoo")
	l := b.observe("ns/zoo")
	if l.Requests != 3 || !reflect.DeepEqual(l.Models, map[string]uint64{"a": 2, "b": 1}) || l.Loads != 1 {
		t.Errorf("load %+v, want 3 requests, models a:2 b:1 and 1 load", l)
	}
}
