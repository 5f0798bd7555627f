package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakeKubelet is the kubelet's PodResources API, in process, on a unix
// socket: what it lists can change between calls, and it can fail.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu   sync.Mutex
	pods []*podresourcesv1.PodResources
	err  error
}

func (f *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: f.pods}, nil
}

func (f *fakeKubelet) set(err error, pods ...*podresourcesv1.PodResources) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods, f.err = pods, err
}

// serveFakeKubelet serves f on a socket in a temporary folder and returns
// the socket's path. The folder is made short: a unix socket's path is
// limited to about 100 bytes, which t.TempDir can exceed.
func serveFakeKubelet(t *testing.T, f *fakeKubelet) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sock
}

func podRes(ns, name string, devs map[string][]string) *podresourcesv1.PodResources {
	c := &podresourcesv1.ContainerResources{Name: "c"}
	for res, ids := range devs {
		c.Devices = append(c.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: ids})
	}
	return &podresourcesv1.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesv1.ContainerResources{c}}
}

func TestPodResourcesDevices(t *testing.T) {
	const res = "nvidia.com/gpu"
	tests := []struct {
		name          string
		pods          []*podresourcesv1.PodResources
		err           error
		holders, clms []gpu.PodDevices
		wantErr       string
	}{
		{name: "nothing on the node"},
		{
			name: "placeholders and other pods",
			pods: []*podresourcesv1.PodResources{
				podRes("openfaas", ReservationPodPrefix+"b", map[string][]string{res: {"GPU-2"}}),
				podRes("openfaas", ReservationPodPrefix+"a", map[string][]string{res: {"GPU-1"}}),
				podRes("ml", "trainer", map[string][]string{res: {"GPU-4", "GPU-3"}}),
				// The same name elsewhere is not faas-gpu's placeholder.
				podRes("other", ReservationPodPrefix+"c", map[string][]string{res: {"GPU-5"}}),
				// Devices of another plugin's resource are not GPUs.
				podRes("ml", "nic", map[string][]string{"example.com/nic": {"eth1"}}),
				podRes("openfaas", "gateway", nil),
			},
			holders: []gpu.PodDevices{{Pod: "openfaas/" + ReservationPodPrefix + "a", Devices: []string{"GPU-1"}}, {Pod: "openfaas/" + ReservationPodPrefix + "b", Devices: []string{"GPU-2"}}},
			clms:    []gpu.PodDevices{{Pod: "ml/trainer", Devices: []string{"GPU-3", "GPU-4"}}, {Pod: "other/" + ReservationPodPrefix + "c", Devices: []string{"GPU-5"}}},
		},
		{name: "kubelet fails", err: status.Error(codes.Unavailable, "kubelet restarting"), wantErr: "kubelet restarting"},
	}
	f := &fakeKubelet{}
	pr, err := NewPodResources(serveFakeKubelet(t, f), res, "openfaas")
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.set(tt.err, tt.pods...)
			holders, claims, err := pr.Devices(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "PodResources") {
					t.Fatalf("err %v, want one naming PodResources and %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(holders, tt.holders) || !reflect.DeepEqual(claims, tt.clms) {
				t.Fatalf("placeholders %v claims %v\nwant %v and %v", holders, claims, tt.holders, tt.clms)
			}
		})
	}
}

func TestNewPodResourcesNeedsNames(t *testing.T) {
	if _, err := NewPodResources("/x.sock", "", "openfaas"); err == nil {
		t.Fatal("no resource name accepted")
	}
	if _, err := NewPodResources("/x.sock", "nvidia.com/gpu", ""); err == nil {
		t.Fatal("no namespace accepted")
	}
}

func TestScanModelStore(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"resnet50", "vgg16", ".fetch-bert"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "alexnet"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		want      []string
	}{
		{"store, partial fetch left out", dir, []string{"alexnet", "resnet50", "vgg16"}},
		{"no store folder", filepath.Join(dir, "absent"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ScanModelStore(tt.dir)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ScanModelStore = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	// A file where the folder should be is an error, not an empty store.
	if _, err := ScanModelStore(filepath.Join(dir, "alexnet")); err == nil {
		t.Fatal("a file as the store was read as a store")
	}
}

// The agent publishes the store's models and the placeholders' GPUs on the
// Node, patches again when either changes, and on a kubelet failure keeps
// the last good annotation rather than publish one without placeholders.
func TestAgentPublishesStoreAndPlaceholders(t *testing.T) {
	store := t.TempDir()
	if err := os.Mkdir(filepath.Join(store, "resnet50"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fakeKubelet{}
	f.set(nil, podRes("openfaas", ReservationPodPrefix+"a", map[string][]string{"nvidia.com/gpu": {"GPU-1"}}))
	pr, err := NewPodResources(serveFakeKubelet(t, f), "nvidia.com/gpu", "openfaas")
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	a, err := New(Config{Source: &seqSource{seq: []func() (gpu.NodeGPUs, error){ok(nodeGPUs(0))}}, Publisher: NewAnnotationPublisher(client, "n1"),
		ModelStore: store, Devices: pr, Interval: time.Hour, Log: zap.NewNop(), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	annotation := func() gpu.NodeGPUs {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := gpu.ParseNodeGPUs("n1", n.Annotations[gpu.AnnotationNodeGPUs])
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := a.publish(ctx, nodeGPUs(0)); err != nil {
		t.Fatal(err)
	}
	got := annotation()
	if !reflect.DeepEqual(got.Models, []string{"resnet50"}) || len(got.Placeholders) != 1 || got.Placeholders[0].Devices[0] != "GPU-1" {
		t.Fatalf("annotation %+v", got)
	}

	// A model fetched into the store: patched.
	if err := os.Mkdir(filepath.Join(store, "vgg16"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := annotation(); !reflect.DeepEqual(got.Models, []string{"resnet50", "vgg16"}) || patches(client) != 2 {
		t.Fatalf("after a fetch: models %v, %d patches", got.Models, patches(client))
	}

	// The kubelet fails: the pass fails and the annotation keeps the
	// placeholder.
	f.set(status.Error(codes.Unavailable, "down"))
	err = a.pass(ctx)
	if err == nil || !strings.Contains(err.Error(), "PodResources") {
		t.Fatalf("pass = %v, want the kubelet's failure", err)
	}
	if got := annotation(); len(got.Placeholders) != 1 || patches(client) != 2 {
		t.Fatalf("after a kubelet failure: %+v, %d patches", got, patches(client))
	}
	if errors.Is(err, gpu.ErrNoDiscovery) {
		t.Fatal("a kubelet failure must not read as the driver gone")
	}
}
