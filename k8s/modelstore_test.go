package k8s

import (
	"testing"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
)

// The node model store is a read-only hostPath at the same path, named by
// FAAS_GPU_MODEL_DIR; with no store, neither the volume nor the variable.
func TestRenderModelStore(t *testing.T) {
	f := spec("f", 50, nil)
	g := groupSpec{Function: f, Model: "m", Name: "f-g", Placement: placement("a", "GPU-a0"), Config: scheduler.SliceConfig{SMPercent: 50, Batch: 1}, Replicas: 1}
	tests := []struct {
		name  string
		store string
	}{
		{"store", "/var/lib/faas-gpu/models"},
		{"no store", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := renderDeployment(g, renderOptions{ModelStore: tt.store}).Spec.Template.Spec
			c := pod.Containers[0]
			var vol *corev1.Volume
			for i := range pod.Volumes {
				if pod.Volumes[i].Name == "model-store" {
					vol = &pod.Volumes[i]
				}
			}
			env, hasEnv := envOf(c)["FAAS_GPU_MODEL_DIR"]
			if tt.store == "" {
				if vol != nil || hasEnv {
					t.Fatalf("no store, yet volume %+v, FAAS_GPU_MODEL_DIR=%q", vol, env)
				}
				return
			}
			if vol == nil || vol.HostPath == nil || vol.HostPath.Path != tt.store {
				t.Fatalf("volume %+v, want hostPath %s", vol, tt.store)
			}
			var mount *corev1.VolumeMount
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == "model-store" {
					mount = &c.VolumeMounts[i]
				}
			}
			if mount == nil || !mount.ReadOnly || mount.MountPath != tt.store {
				t.Fatalf("mount %+v, want read-only at %s", mount, tt.store)
			}
			if env != tt.store {
				t.Fatalf("FAAS_GPU_MODEL_DIR=%q, want %s", env, tt.store)
			}
		})
	}
}
