package k8s

import (
	"reflect"
	"testing"
	"time"
)

// What a pod says its model loads took shows on its replica in
// /system/gpus; a pod never routed to is not kept.
func TestPodModelLoadTimesReachTheReport(t *testing.T) {
	now := time.Now()
	st := testState(cluster2x2())
	mustDeploy(t, st, spec("f", 50, nil), now)
	group := st.groupSpecs("ns/f")[0].Name
	pod := functionPod("f", group, "f-pod", now.Truncate(time.Second).Add(time.Second), 3*time.Second)
	pod.Annotations = map[string]string{AnnotationModel: "m-f"}
	b := fakeBackend(t, pod)
	b.st = st
	if _, err := b.Route("ns", "f", ""); err != nil {
		t.Fatal(err)
	}
	b.ReplicaModelLoads("gone-pod", map[string]float64{"x": 1})
	b.ReplicaModelLoads("f-pod", map[string]float64{"m-f": 2.5})
	loads := map[string]map[string]float64{}
	for _, n := range b.report(st).Nodes {
		for _, g := range n.GPUs {
			for _, rr := range g.Replicas {
				loads[rr.ID] = rr.ModelLoadSeconds
			}
		}
	}
	if want := map[string]map[string]float64{"f-pod": {"m-f": 2.5}}; !reflect.DeepEqual(loads, want) {
		t.Errorf("load times by replica = %v, want %v", loads, want)
	}
}
