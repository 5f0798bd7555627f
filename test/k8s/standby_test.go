package k8s

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// An autoscaled function with traffic keeps a standby: a pod beyond the
// one it serves on, labelled out of routing (no request reaches it),
// shown idle and standby in /system/gpus with no SMs booked; a rise puts
// that same pod in service.
func TestStandbyPodOnKubernetes(t *testing.T) {
	requireNodes(t)
	p, port := startClassify(t, "standby")
	serving := livePods(t, "classify")[0]
	served := map[string]bool{}
	for name := range fakePods(t, "classify", port, 0) {
		served[name] = true
	}

	// A light load: the function settles on its one replica and gets a
	// standby.
	stopLight := loadFunction(http.DefaultClient, p.url+"/function/classify", 1, 200*time.Millisecond)
	var standby corev1.Pod
	if err := poll(30*time.Second, func() bool {
		for _, pod := range livePods(t, "classify") {
			if pod.UID != serving.UID && pod.Labels[labelWarm] == "true" && pod.Status.PodIP != "" {
				standby = pod
				return true
			}
		}
		return false
	}); err != nil {
		stopLight()
		t.Fatalf("no standby pod labelled out of routing: pods %v, %+v", podNames(livePods(t, "classify")), p.gpus(t).Functions)
	}
	inService := 0
	for _, pod := range livePods(t, "classify") {
		if pod.Labels[labelWarm] != "true" {
			inService++
		}
	}
	if st := p.status(t, "classify"); int(st.Replicas) != inService {
		t.Errorf("status %d replicas, %d pods in routing beside the standby; a standby is not a replica in service", st.Replicas, inService)
	}
	found := false
	for _, n := range p.gpus(t).Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if r.ID == standby.Name {
					found = true
					if !r.Idle || !r.Standby {
						t.Errorf("/system/gpus: %+v; want the standby idle and marked standby", r)
					}
				}
			}
		}
	}
	if !found {
		t.Errorf("/system/gpus does not show the standby pod %s", standby.Name)
	}
	var hits *atomic.Int64
	for name, n := range fakePodsBut(t, "classify", port, 0, served) {
		if name == standby.Name {
			hits = n
		}
	}
	if hits == nil {
		stopLight()
		t.Fatalf("standby pod %s does not listen", standby.Name)
	}
	time.Sleep(2 * time.Second)
	stopLight()
	if n := hits.Load(); n != 0 {
		t.Errorf("the standby pod %s served %d requests out of routing", standby.Name, n)
	}

	// A rise: the standby's own pod goes in service.
	stopHeavy := loadFunction(http.DefaultClient, p.url+"/function/classify", 16, 0)
	err := poll(20*time.Second, func() bool {
		for _, pod := range livePods(t, "classify") {
			if pod.UID == standby.UID {
				return pod.Labels[labelWarm] != "true" && hits.Load() > 0
			}
		}
		return false
	})
	stopHeavy()
	if err != nil {
		t.Fatalf("the standby pod %s not put in service by the rise (%d requests): pods %v, %+v", standby.Name, hits.Load(), podNames(livePods(t, "classify")), p.gpus(t).Functions)
	}
}
