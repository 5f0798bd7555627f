package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultPodResourcesSocket is where the kubelet serves its PodResources
// API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// ReservationPodPrefix starts the name of every faas-gpu placeholder pod
// (k8s.reservationName). PodResources names pods but carries no labels, so
// the agent tells placeholders from other pods by namespace and name.
const ReservationPodPrefix = "faas-gpu-reserve-"

// PodResources reads the GPUs the kubelet's device plugin gave each pod on
// this node, through the kubelet's PodResources gRPC API.
type PodResources struct {
	conn *grpc.ClientConn
	api  podresourcesv1.PodResourcesListerClient
	// resource is the device plugin's resource ("nvidia.com/gpu").
	resource string
	// namespace holds the placeholder pods (the provider's namespace).
	namespace string
	timeout   time.Duration
}

// NewPodResources reaches the kubelet at socket (a unix socket path). The
// connection is made lazily, so an agent started before the kubelet's
// socket exists still starts.
func NewPodResources(socket, resource, namespace string) (*PodResources, error) {
	if resource == "" || namespace == "" {
		return nil, fmt.Errorf("agent: PodResources needs the GPU resource name and the placeholders' namespace")
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("agent: -pod-resources-socket %s: %w", socket, err)
	}
	return &PodResources{conn: conn, api: podresourcesv1.NewPodResourcesListerClient(conn), resource: resource, namespace: namespace, timeout: 10 * time.Second}, nil
}

// Close closes the connection.
func (p *PodResources) Close() error { return p.conn.Close() }

// Devices lists the GPUs held by faas-gpu's placeholder pods and those
// held by any other pod, each sorted by pod.
func (p *PodResources) Devices(ctx context.Context) (placeholders, claims []gpu.PodDevices, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet PodResources List: %w", err)
	}
	for _, pod := range resp.GetPodResources() {
		var devs []string
		for _, c := range pod.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == p.resource {
					devs = append(devs, d.GetDeviceIds()...)
				}
			}
		}
		if len(devs) == 0 {
			continue
		}
		sort.Strings(devs)
		pd := gpu.PodDevices{Pod: pod.GetNamespace() + "/" + pod.GetName(), Devices: devs}
		if pod.GetNamespace() == p.namespace && strings.HasPrefix(pod.GetName(), ReservationPodPrefix) {
			placeholders = append(placeholders, pd)
		} else {
			claims = append(claims, pd)
		}
	}
	byPod := func(s []gpu.PodDevices) { sort.Slice(s, func(i, j int) bool { return s[i].Pod < s[j].Pod }) }
	byPod(placeholders)
	byPod(claims)
	return placeholders, claims, nil
}
