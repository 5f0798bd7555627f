package k8s

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Function pods share a GPU through MPS and do not ask the NVIDIA device
// plugin for nvidia.com/gpu (the plugin hands out whole GPUs). To keep the
// plugin from giving a GPU faas-gpu uses to another pod, every GPU holding
// a booking gets one placeholder pod on its node asking for
// nvidia.com/gpu: 1, as FaST-GShare does. The scheduler then counts that
// GPU as taken; docs/kubernetes.md says what this does and does not
// guarantee.

// ensureReservation makes sure the GPU has its placeholder before replicas
// are put on it.
func (b *Backend) ensureReservation(ctx context.Context, gpuUUID, node string) error {
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if _, ok := b.resv[gpuUUID]; ok {
		b.resv[gpuUUID] = time.Time{}
		return nil
	}
	name := reservationName(gpuUUID)
	if p, err := b.resvPods.Pods(b.cfg.Namespace).Get(name); err == nil && p.DeletionTimestamp == nil {
		b.resv[gpuUUID] = time.Time{}
		return nil
	}
	pod := renderReservation(b.cfg.Namespace, node, gpuUUID, b.cfg.ReservationImage)
	_, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("reserve GPU %s on %s: %w", gpuUUID, node, err)
	}
	if err == nil {
		b.log.Info("GPU reserved against the device plugin", zap.String("gpu", gpuUUID), zap.String("node", node), zap.String("pod", b.cfg.Namespace+"/"+name))
	}
	b.resv[gpuUUID] = time.Time{}
	return nil
}

// syncReservations gives every booked GPU its placeholder and removes the
// placeholders of GPUs unused for Options.ReservationGrace.
func (b *Backend) syncReservations(ctx context.Context, now time.Time) error {
	done, err := b.beginWrite()
	if err != nil {
		return err
	}
	defer done()
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	b.mu.Lock()
	if b.st == nil {
		b.mu.Unlock()
		return nil
	}
	want := b.st.reservedGPUs()
	b.mu.Unlock()

	has, _ := labels.NewRequirement(LabelReservation, selection.Exists, nil)
	pods, _ := b.resvPods.Pods(b.cfg.Namespace).List(labels.NewSelector().Add(*has))
	present := map[string]string{} // UUID -> pod name
	for _, p := range pods {
		if u := p.Annotations[AnnotationGPUs]; u != "" && p.DeletionTimestamp == nil {
			present[u] = p.Name
		}
	}
	for u := range b.resv {
		if _, ok := present[u]; !ok {
			present[u] = reservationName(u)
		}
	}
	for u, node := range want {
		b.resv[u] = time.Time{}
		if _, ok := present[u]; ok {
			continue
		}
		pod := renderReservation(b.cfg.Namespace, node, u, b.cfg.ReservationImage)
		if _, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("reserve GPU %s on %s: %w", u, node, err)
		}
	}
	for u, name := range present {
		if _, ok := want[u]; ok {
			continue
		}
		since, known := b.resv[u]
		if !known || since.IsZero() {
			b.resv[u] = now
			continue
		}
		if now.Sub(since) < b.cfg.ReservationGrace {
			continue
		}
		err := b.client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release GPU %s: %w", u, err)
		}
		delete(b.resv, u)
		b.log.Info("GPU reservation released", zap.String("gpu", u), zap.String("pod", b.cfg.Namespace+"/"+name))
	}
	return nil
}
