// Command smfn is an of-watchdog mode=http function that behaves like an
// inference kernel on an MPS slice of a GPU, for the tests of
// `faas-gpu profile`. It needs only the standard library so that tests can
// build it with a plain `go build`.
//
// A batch takes SMFN_WORK_MS × 100 / sm milliseconds (sm is
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 100 when unset), never less than
// SMFN_FLOOR_MS: a kernel's work spreads over the SMs it is given, and launch
// and memory traffic cost a floor no SM count removes. Requests are served one
// batch at a time, as a GPU slice runs one kernel at a time, so requests
// beyond the batch queue and throughput rises with the SM %.
//
// FAAS_GPU_BATCH (default 1) is the largest batch: the requests waiting when
// the slice frees up, up to that many, run together and take
// (batch+1)/2 times as long as one, so batching raises throughput.
//
// It listens on 127.0.0.1:$port, or on $SMFN_ADDR:$port: test/k8s runs it
// on a kwok pod's loopback IP, standing in for the kubelet.
//
// Every answer carries X-Smfn-Sm and X-Smfn-Batch (the batch it ran in) so a
// test can see what the replica was given.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// config is what the environment asks of the replica.
type config struct {
	sm       int
	maxBatch int
	work     time.Duration // one request's work on the whole GPU
	floor    time.Duration
}

func main() {
	cfg, err := readConfig(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "smfn: %v\n", err)
		os.Exit(2)
	}
	port := os.Getenv("port")
	if port == "" {
		port = "8080"
	}
	host := os.Getenv("SMFN_ADDR")
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "smfn: listen: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("smfn listening on %s: sm %d%%, batch up to %d, %s per request\n", port, cfg.sm, cfg.maxBatch, cfg.serviceTime(1))
	g := &slice{cfg: cfg, queue: make(chan *job, 1024)}
	go g.run()
	if err := http.Serve(ln, g); err != nil {
		fmt.Fprintf(os.Stderr, "smfn: serve: %v\n", err)
		os.Exit(1)
	}
}

func readConfig(getenv func(string) string) (config, error) {
	cfg := config{sm: 100, maxBatch: 1, work: 4 * time.Millisecond, floor: time.Millisecond}
	ints := []struct {
		name string
		dst  *int
		min  int
		max  int
	}{
		{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", &cfg.sm, 1, 100},
		{"FAAS_GPU_BATCH", &cfg.maxBatch, 1, 1024},
	}
	for _, v := range ints {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < v.min || n > v.max {
			return config{}, fmt.Errorf("%s: %q is not an integer in %d-%d", v.name, s, v.min, v.max)
		}
		*v.dst = n
	}
	durs := []struct {
		name string
		dst  *time.Duration
	}{{"SMFN_WORK_MS", &cfg.work}, {"SMFN_FLOOR_MS", &cfg.floor}}
	for _, v := range durs {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		ms, err := strconv.ParseFloat(s, 64)
		if err != nil || ms < 0 {
			return config{}, fmt.Errorf("%s: %q is not a number of milliseconds", v.name, s)
		}
		*v.dst = time.Duration(ms * float64(time.Millisecond))
	}
	return cfg, nil
}

// serviceTime is how long a batch of n requests holds the slice.
func (c config) serviceTime(n int) time.Duration {
	one := max(c.work*100/time.Duration(c.sm), c.floor)
	return one * time.Duration(n+1) / 2
}

// job is one request waiting for the slice.
type job struct {
	done  chan struct{}
	batch int // set before done is closed
}

// slice serializes requests like a GPU slice: one batch at a time.
type slice struct {
	cfg   config
	queue chan *job
}

func (g *slice) run() {
	for first := range g.queue {
		batch := []*job{first}
	fill: // take what is already waiting, never wait for more
		for len(batch) < g.cfg.maxBatch {
			select {
			case j := <-g.queue:
				batch = append(batch, j)
			default:
				break fill
			}
		}
		time.Sleep(g.cfg.serviceTime(len(batch)))
		for _, j := range batch {
			j.batch = len(batch)
			close(j.done)
		}
	}
}

func (g *slice) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	j := &job{done: make(chan struct{})}
	g.queue <- j
	select {
	case <-j.done:
	case <-r.Context().Done():
		return // the slice still runs it, as a GPU would
	}
	w.Header().Set("X-Smfn-Sm", strconv.Itoa(g.cfg.sm))
	w.Header().Set("X-Smfn-Batch", strconv.Itoa(j.batch))
	fmt.Fprintf(w, "sm %d%%, batch %d\n", g.cfg.sm, j.batch)
}
