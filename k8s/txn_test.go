package k8s

import (
	"context"
	"strconv"
	"testing"

	"github.com/faas-gpu/faas-gpu/scheduler"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// view is what a change must leave as it was when it fails: the
// function's spec and count, its bookings per GPU, pending and draining
// replicas.
func view(b *Backend, name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.st
	out := ""
	if v, ok := st.core.Function(fnKey("ns", name)); ok {
		out = layout(st, name) + " image=" + v.Spec.Deployment.Image + " desired=" + itoa(v.Desired)
	} else {
		out = "absent"
	}
	for _, u := range st.core.Usage() {
		out += " " + u.Device.UUID + "=" + itoa(u.SMAllocated)
	}
	return out + " drains=" + itoa(len(st.drains))
}

func itoa(n int) string { return strconv.Itoa(n) }

// A deploy, update, scale or delete whose record cannot be written
// answers an error and changes nothing: no booking, no pending replica, the
// previous spec and count. Once the API server accepts writes again the
// same request succeeds (not 409 for a function half made).
func TestFailedWriteChangesNothing(t *testing.T) {
	ctx := context.Background()
	grow := func(name string, sm int, image string) scheduler.Function {
		f := spec(name, sm, map[string]string{scheduler.LabelScaleMin: "1"})
		f.Deployment.Image = image
		return f
	}
	cases := []struct {
		name     string
		verb     string // the write refused
		existing bool   // f is deployed first
		do       func(b *Backend) error
		after    string // the view once the retry succeeded
	}{
		{"deploy", "create", false, func(b *Backend) error { return b.Deploy(ctx, grow("f", 50, "img")) },
			"GPU-a0:1 pending=0 image=img desired=1 GPU-a0=50 GPU-a1=0 GPU-b0=0 GPU-b1=0 drains=0"},
		{"scale up", "update", true, func(b *Backend) error { return b.Scale(ctx, "ns", "f", 3) },
			"GPU-a0:2 GPU-a1:1 pending=0 image=img desired=3 GPU-a0=100 GPU-a1=50 GPU-b0=0 GPU-b1=0 drains=0"},
		{"update to another slice", "update", true, func(b *Backend) error { return b.Update(ctx, grow("f", 80, "img:2")) },
			"GPU-a1:1 pending=0 image=img:2 desired=1 GPU-a0=50 GPU-a1=80 GPU-b0=0 GPU-b1=0 drains=1"},
		{"delete", "delete", true, func(b *Backend) error { return b.Delete(ctx, "ns", "f") },
			"absent GPU-a0=50 GPU-a1=0 GPU-b0=0 GPU-b1=0 drains=1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := fakeLeader(t)
			if c.existing {
				if err := b.Deploy(ctx, grow("f", 50, "img")); err != nil {
					t.Fatal(err)
				}
			}
			before := view(b, "f")
			refuse := failing(b, c.verb, "services")
			refuse.Store(true)
			err := c.do(b)
			if err == nil {
				t.Fatal("the change succeeded though its record could not be written")
			}
			if got := view(b, "f"); got != before {
				t.Fatalf("a failed %s changed the state:\n%s\nwas\n%s", c.name, got, before)
			}
			refuse.Store(false)
			if err := c.do(b); err != nil {
				t.Fatalf("the retry: %v", err)
			}
			if got := view(b, "f"); got != c.after {
				t.Fatalf("after the retry:\n%s\nwant\n%s", got, c.after)
			}
			_, err = b.client.CoreV1().Services("ns").Get(ctx, "f", metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != (c.name == "delete") {
				t.Fatalf("the record after the retry: %v", err)
			}
		})
	}
}

// A change whose write failed half way (one Deployment scaled up, the
// next refused) is undone without freeing what the written Deployment
// may already run: every Deployment's replicas stay booked, drained once
// its pods are gone.
func TestRollbackKeepsWhatMayRunBooked(t *testing.T) {
	ctx := context.Background()
	b := fakeLeader(t)
	if err := b.Deploy(ctx, spec("f", 50, nil)); err != nil {
		t.Fatal(err)
	}
	refuse := failing(b, "create", "deployments")
	refuse.Store(true)
	if err := b.Scale(ctx, "ns", "f", 3); err == nil { // a0's group to 2, a new group on a1 refused
		t.Fatal("the scale succeeded though a Deployment could not be made")
	}
	deps, err := b.client.AppsV1().Deployments("ns").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	booked := map[string]int{}
	for _, v := range b.st.core.Functions() {
		for _, g := range b.st.groups(v) {
			booked[g.name] += len(g.ids)
		}
	}
	for _, d := range b.st.drains {
		booked[d.group] += len(d.ids)
	}
	v, _ := b.st.core.Function("ns/f")
	placed, pending := 0, 0
	for _, r := range v.Live {
		if r.Placement != nil {
			placed++
		} else {
			pending++
		}
	}
	b.mu.Unlock()
	for _, d := range deps.Items {
		if int(*d.Spec.Replicas) > booked[d.Name] {
			t.Errorf("deployment %s asks for %d pods, %d booked", d.Name, *d.Spec.Replicas, booked[d.Name])
		}
	}
	if v.Desired != 1 || placed != 1 || pending != 0 {
		t.Errorf("after the failed scale: desired %d, placed %d, pending %d; want 1, 1, 0", v.Desired, placed, pending)
	}
	refuse.Store(false)
	if err := b.Scale(ctx, "ns", "f", 3); err != nil {
		t.Fatalf("the retry: %v", err)
	}
}
