package handlers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkProxyOverhead compares a request sent straight to an emulated
// replica that answers at once with the same request through the proxy:
// the difference is what the proxy costs per invocation on loopback. The
// proxy runs as serve runs it: with its metrics, for a function with an
// SLO (one more lookup, the violations counter and the last-minute window).
func BenchmarkProxyOverhead(b *testing.B) {
	t := b
	popts := handlers.ProxyOptions{Timeout: 10 * time.Second, Metrics: handlers.NewProxyMetrics(prometheus.NewRegistry())}
	srv, backend := newServerAndBackend(t, local.Config{}, popts)
	mustDo(t, srv, "POST", "/system/functions", `{"service":"echo","image":"img","annotations":{"com.openfaas.gpu.sm":"10","com.openfaas.gpu.memory":"1Gi","com.openfaas.gpu.slo":"100ms"}}`, 202)
	var eps []scheduler.Endpoint
	for deadline := time.Now().Add(5 * time.Second); len(eps) == 0 && time.Now().Before(deadline); {
		eps, _ = backend.Replicas(handlers.DefaultNamespace, "echo")
		time.Sleep(5 * time.Millisecond)
	}
	if len(eps) == 0 {
		b.Fatal("replica never ready")
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	call := func(b *testing.B, url string) {
		for range b.N {
			resp, err := client.Post(url, "text/plain", strings.NewReader("ping"))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("direct", func(b *testing.B) { call(b, eps[0].URL) })
	b.Run("proxied", func(b *testing.B) { call(b, srv.URL+"/function/echo") })
	var st struct{ InvocationCount float64 }
	_ = json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/function/echo", "", 200)), &st)
	if st.InvocationCount == 0 {
		b.Fatal("the proxied calls were not counted")
	}
	if m, ok := popts.Metrics.Measured(handlers.DefaultNamespace, "echo", 100*time.Millisecond); !ok || m.SLOViolations == nil {
		b.Fatalf("the proxied calls were not measured against the SLO: %+v", m)
	}
}
