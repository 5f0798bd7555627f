//go:build linux

package local

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// netNS is a replica's own network namespace: loopback only, so a
// template's server can listen on its fixed port (5000, 3000, 8082) beside
// other replicas doing the same. The provider holds it by a file
// descriptor, forks the replica's process from a thread switched into it,
// and dials the replica's port from a thread switched into it; no bind
// mount is made, so the namespace is gone as soon as the process has exited
// and Close has run.
//
// The switching thread is locked for the switch and switched back before
// it is unlocked. If switching back fails, the goroutine ends still locked
// and the Go runtime retires that thread rather than reuse it in the wrong
// namespace (a replica forked from it just then gets its Pdeathsig, and
// is restarted).
type netNS struct {
	mu     sync.Mutex
	fd     int // -1 once closed
	origFD int // the provider's own namespace, to switch back to
}

// newNetNS makes a namespace with loopback up. It needs CAP_SYS_ADMIN
// (root); the error says why it could not be made.
func newNetNS() (*netNS, error) {
	// The calling thread's namespace, not /proc/self's: /proc/self is the
	// main thread, which may be the very thread another replica's start
	// has switched into its namespace just now. Any thread not locked by
	// onThread is in the provider's own namespace, this one included.
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("network namespace: open the provider's own: %w", err)
	}
	ns := &netNS{fd: -1, origFD: orig}
	err = ns.onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("network namespace: unshare: %w (needs root or CAP_SYS_ADMIN)", err)
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("network namespace: open the new one: %w", err)
		}
		ns.fd = fd
		return loopbackUp()
	}, false)
	if err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// loopbackUp brings lo up in the calling thread's namespace: a new
// namespace has it down, and 127.0.0.1 unreachable.
func loopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("network namespace: socket: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("network namespace: read lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("network namespace: bring lo up: %w", err)
	}
	return nil
}

// onThread runs f on a locked OS thread, entering the namespace first
// when enter is set (newNetNS enters a fresh one itself), and switches the
// thread back to the provider's namespace afterwards.
func (ns *netNS) onThread(f func() error, enter bool) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns.mu.Lock()
		fd, orig := ns.fd, ns.origFD
		ns.mu.Unlock()
		if enter {
			if fd < 0 {
				runtime.UnlockOSThread()
				errc <- fmt.Errorf("network namespace: closed")
				return
			}
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				errc <- fmt.Errorf("network namespace: enter: %w", err)
				return
			}
		}
		err := f()
		if berr := unix.Setns(orig, unix.CLONE_NEWNET); berr != nil {
			// Left locked on purpose: see netNS.
			errc <- fmt.Errorf("network namespace: switch back: %w", berr)
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// run runs f (a process start) inside the namespace: what f forks is born
// in it.
func (ns *netNS) run(f func() error) error { return ns.onThread(f, true) }

// dial connects to addr inside the namespace. The socket belongs to the
// namespace it was made in, so it can be used from any thread afterwards.
func (ns *netNS) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.onThread(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	}, true)
	if err != nil && c != nil {
		_ = c.Close()
		c = nil
	}
	return c, err
}

// Close lets the namespace go; the kernel frees it once no process is in
// it.
func (ns *netNS) Close() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.fd >= 0 {
		_ = unix.Close(ns.fd)
		ns.fd = -1
	}
	if ns.origFD >= 0 {
		_ = unix.Close(ns.origFD)
		ns.origFD = -1
	}
}

// inode identifies the namespace, as /proc/<pid>/ns/net shows it
// ("net:[inode]"), for tests that check it is gone.
func (ns *netNS) inode() uint64 {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	var st unix.Stat_t
	if ns.fd < 0 || unix.Fstat(ns.fd, &st) != nil {
		return 0
	}
	return st.Ino
}
