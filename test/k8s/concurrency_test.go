package k8s

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// Many clients deploying, scaling and removing at once, asking for more
// than the cluster holds: no GPU is ever given more than 100 % SM or more
// memory than it has, in the pods, the Deployments or /system/gpus; and
// once the dust settles every function has what it asked for, placed or
// pending.
func TestConcurrentClientsNeverOversubscribe(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "concurrent")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	const clients = 12
	sms := []int{10, 20, 25, 30, 40, 50, 60}
	mems := []string{"1Gi", "2Gi", "3Gi", "5Gi", "7Gi"}
	var wg sync.WaitGroup
	errs := make(chan error, clients*8)
	want := make([]int, clients)
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 42))
			name := fmt.Sprintf("c%02d", i)
			do := func(method, path string, body any) {
				if code, b := p.call(t, method, path, body); code != http.StatusAccepted {
					errs <- fmt.Errorf("%s %s: %d %s", method, path, code, b)
				}
			}
			do(http.MethodPost, "/system/functions", fn(name, sms[r.IntN(len(sms))], mems[r.IntN(len(mems))]))
			n := 1
			for range 3 {
				n = r.IntN(6)
				do(http.MethodPost, "/system/scale-function/"+name, types.ScaleServiceRequest{ServiceName: name, Replicas: uint64(n)})
			}
			if i%4 == 0 { // some change their slice on the way
				do(http.MethodPut, "/system/functions", fn(name, sms[r.IntN(len(sms))], mems[r.IntN(len(mems))]))
			}
			if i%5 == 0 {
				do(http.MethodDelete, "/system/functions", types.DeleteFunctionRequest{FunctionName: name})
				n = -1
			}
			want[i] = n
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d clients: deploys, scales, updates and deletes answered in %v", clients, time.Since(start).Round(time.Millisecond))

	// Settled: each function's desired count is placed or pending, and the
	// pods that run are the placed ones.
	var problems []string
	err := poll(60*time.Second, func() bool {
		problems = problems[:0]
		rep := p.gpus(t)
		pending := map[string]int{}
		for _, pe := range rep.Pending {
			pending[pe.Function]++
		}
		for i, n := range want {
			name := fmt.Sprintf("c%02d", i)
			code, _ := p.call(t, http.MethodGet, "/system/function/"+name, nil)
			if n < 0 {
				if code != http.StatusNotFound {
					problems = append(problems, name+" not deleted")
				}
				continue
			}
			st := p.status(t, name)
			if int(st.Replicas) != n || int(st.AvailableReplicas)+pending[name] != n {
				problems = append(problems, fmt.Sprintf("%s: %d desired, %d available + %d pending", name, st.Replicas, st.AvailableReplicas, pending[name]))
			}
		}
		return len(problems) == 0
	})
	if err != nil {
		t.Fatalf("not settled after 60s:\n%s", strings.Join(problems, "\n"))
	}
	if err := checkAll(context.Background(), p.gpus(t)); err != nil {
		t.Fatal(err)
	}
}
