//go:build !linux

package local

import (
	"context"
	"errors"
	"net"
)

// netNS: network namespaces are Linux's; elsewhere none can be made, and
// replicas with a fixed upstream port run one per port.
type netNS struct{}

func newNetNS() (*netNS, error) {
	return nil, errors.New("network namespaces need Linux")
}

func (*netNS) run(f func() error) error { return f() }
func (*netNS) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}
func (*netNS) Close()        {}
func (*netNS) inode() uint64 { return 0 }
