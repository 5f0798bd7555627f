//go:build linux

package local

import (
	"errors"
	"os"
	"syscall"
)

// childSysProcAttr puts a replica's process in its own process group, so
// that stopping it also stops whatever it forked, and has the kernel kill it
// if the provider dies, so that no replica outlives its provider.
//
// Pdeathsig fires when the OS thread that forked the child exits; the Go
// runtime only retires threads of goroutines that exit while locked to their
// thread, which this package never does.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup signals the process group led by p. A group that is already
// gone is not an error: the goal was for it to be gone.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil {
		return nil
	}
	err := syscall.Kill(-p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
