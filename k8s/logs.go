package k8s

import (
	"bufio"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/openfaas/faas-provider/logs"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// logPollPeriod is how often a followed query looks for new pods.
const logPollPeriod = time.Second

// Query streams the logs of a function's pods (Instance: one pod) through
// the API server. A followed query also picks up pods that start while it
// runs; it ends when ctx does (the handler's write timeout or the client).
// A pod whose logs cannot be read is skipped and logged.
func (b *Backend) Query(ctx context.Context, req logs.Request) (<-chan logs.Message, error) {
	ns := req.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	out := make(chan logs.Message, 64)
	go func() {
		defer close(out)
		var wg sync.WaitGroup
		started := map[types.UID]bool{}
		startNew := func() {
			for _, p := range b.functionPods(ns, req.Name) {
				if started[p.UID] || (req.Instance != "" && p.Name != req.Instance) || p.Spec.NodeName == "" {
					continue
				}
				started[p.UID] = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					b.streamPod(ctx, p, req, out)
				}()
			}
		}
		startNew()
		if req.Follow {
			t := time.NewTicker(logPollPeriod)
		poll:
			for {
				select {
				case <-ctx.Done():
					break poll
				case <-t.C:
					startNew()
				}
			}
			t.Stop()
		}
		wg.Wait()
	}()
	return out, nil
}

// streamPod copies one pod's log into out, one message a line; kubelet
// timestamps each line (RFC 3339).
func (b *Backend) streamPod(ctx context.Context, p *corev1.Pod, req logs.Request, out chan<- logs.Message) {
	opts := &corev1.PodLogOptions{Container: req.Name, Follow: req.Follow, Timestamps: true}
	if req.Tail > 0 {
		opts.TailLines = ptr(int64(req.Tail))
	}
	if req.Since != nil {
		opts.SinceTime = ptr(metav1.NewTime(*req.Since))
	}
	stream, err := b.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Debug("pod logs unavailable", zap.String("pod", p.Namespace+"/"+p.Name), zap.Error(err))
		}
		return
	}
	defer stream.Close()
	sc := bufio.NewScanner(stream)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ts, text := splitTimestamp(sc.Text())
		msg := logs.Message{Name: req.Name, Namespace: p.Namespace, Instance: p.Name, Timestamp: ts, Text: text}
		select {
		case out <- msg:
		case <-ctx.Done():
			return
		}
	}
}

// splitTimestamp separates the kubelet's timestamp from the line.
func splitTimestamp(line string) (time.Time, string) {
	stamp, rest, ok := strings.Cut(line, " ")
	if !ok {
		return time.Now().UTC(), line
	}
	ts, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Now().UTC(), line
	}
	return ts, rest
}
