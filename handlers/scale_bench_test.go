package handlers_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/gorilla/mux"
	bootstrap "github.com/openfaas/faas-provider"
	"go.uber.org/zap"
)

// The provider at scale: N functions, each one emulated replica of 10 %
// SM and 1 GiB on a cluster of 64 nodes × 8 V100s, all deployed through
// the API as faas-cli does. What is measured (docs/benchmarks.md, "At
// scale"):
//
//   - deploys per second through POST /system/functions;
//   - an invocation's p50 and p99 through the proxy, alone and while a
//     client polls GET /system/gpus 10 times a second (the GPU map does
//     every 2 s; dashboards and scripts more);
//   - one /system/gpus report;
//   - a restart: local.New on the state dir the N functions left;
//   - the process's RSS once every function was invoked.
//
// It uses the provider's HTTP API only, so the same file measures an
// earlier tree as well. Run:
//
//	go test -run '^$' -bench Scale -benchtime 2000x ./handlers/
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run("functions="+strconv.Itoa(n), func(b *testing.B) { benchScale(b, n) })
	}
}

func scaleInventory() gpu.Inventory {
	inv := gpu.Inventory{Source: "bench"}
	for n := range 64 {
		node := gpu.Node{Name: fmt.Sprintf("node-%02d", n)}
		for g := range 8 {
			node.GPUs = append(node.GPUs, gpu.Device{UUID: fmt.Sprintf("GPU-%02d-%d", n, g), Node: node.Name, Index: g,
				Product: gpu.V100Product, MemoryBytes: 16 << 30, SMCount: 80})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	return inv
}

func scaleServer(b *testing.B, dir string) (*httptest.Server, *local.Backend) {
	b.Helper()
	log := zap.NewNop()
	be, err := local.New(local.Config{StateDir: dir, Inventory: scaleInventory(), Log: log})
	if err != nil {
		b.Fatal(err)
	}
	inv := &handlers.Invocations{}
	r := mux.NewRouter()
	r.HandleFunc("/system/functions", handlers.MakeDeployHandler(be, log)).Methods(http.MethodPost)
	r.HandleFunc("/system/gpus", handlers.MakeGPUsHandler(be, nil)).Methods(http.MethodGet)
	name := "{name:[" + bootstrap.NameExpression + "]+}"
	proxy := handlers.MakeProxyHandler(be, inv, handlers.ProxyOptions{Timeout: 10 * time.Second}, log)
	r.HandleFunc("/function/"+name, proxy)
	r.HandleFunc("/function/"+name+"/{params:.*}", proxy)
	srv := httptest.NewServer(r)
	return srv, be
}

func benchScale(b *testing.B, n int) {
	dir := b.TempDir()
	srv, be := scaleServer(b, dir)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func(url, body string) (int, error) {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	began := time.Now()
	for i := range n {
		body := fmt.Sprintf(`{"service":"f%05d","image":"img","annotations":{"com.openfaas.gpu.sm":"10","com.openfaas.gpu.memory":"1Gi"}}`, i)
		if code, err := post(srv.URL+"/system/functions", body); err != nil || code != http.StatusAccepted {
			b.Fatalf("deploy %d: %d %v", i, code, err)
		}
	}
	deploys := float64(n) / time.Since(began).Seconds()

	// Every function invoked once (replicas become ready as they start).
	for i := range n {
		url := fmt.Sprintf("%s/function/f%05d", srv.URL, i)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			code, err := post(url, "x")
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("f%05d: %d %v", i, code, err)
			}
		}
	}
	rss := rssMiB()
	// What the first calls set off in the background (the proxy asking
	// each replica once which models it holds) is over before measuring.
	time.Sleep(2 * time.Second)

	report := func() time.Duration {
		t := time.Now()
		resp, err := client.Get(srv.URL + "/system/gpus")
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		_, _ = io.Copy(&buf, resp.Body)
		resp.Body.Close()
		return time.Since(t)
	}
	// The report's time: the median of 9, so one GC pause does not make it.
	var took []time.Duration
	for range 9 {
		took = append(took, report())
	}
	slices.Sort(took)
	reportTook := took[len(took)/2]

	invoke := func(b *testing.B) []time.Duration {
		lat := make([]time.Duration, 0, b.N)
		for i := range b.N {
			url := fmt.Sprintf("%s/function/f%05d", srv.URL, i%n)
			t := time.Now()
			if code, err := post(url, "x"); err != nil || code != http.StatusOK {
				b.Fatalf("invoke: %d %v", code, err)
			}
			lat = append(lat, time.Since(t))
		}
		return lat
	}
	quantiles := func(b *testing.B, lat []time.Duration) {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("invoke", func(b *testing.B) { quantiles(b, invoke(b)) })
	b.Run("invoke-while-polling-gpus", func(b *testing.B) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					report()
				}
			}
		}()
		lat := invoke(b)
		close(stop)
		wg.Wait()
		quantiles(b, lat)
	})
	srv.Close()
	closed := time.Now()
	if err := be.Close(b.Context()); err != nil {
		b.Fatal(err)
	}
	stopTook := time.Since(closed)
	began = time.Now()
	srv2, be2 := scaleServer(b, dir)
	restart := time.Since(began)
	srv2.Close()
	_ = be2.Close(b.Context())
	// Measured once above; reported here, as a parent of sub-benchmarks
	// prints no metrics of its own.
	b.Run("setup", func(b *testing.B) {
		b.ReportMetric(deploys, "deploys/s")
		b.ReportMetric(float64(reportTook.Microseconds())/1000, "gpus-report-ms")
		b.ReportMetric(restart.Seconds(), "restart-s")
		b.ReportMetric(stopTook.Seconds(), "stop-s")
		b.ReportMetric(rss, "rss-MiB")
	})
}

// rssMiB is this process's resident memory.
func rssMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
