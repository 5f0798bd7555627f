//go:build !linux

package local

import (
	"errors"
	"os"
	"syscall"
)

// childSysProcAttr: faas-gpu only targets Linux; elsewhere replicas run
// without a process group or parent-death signal, so that the package still
// builds for development.
func childSysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup signals only p itself, for lack of process groups.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil {
		return nil
	}
	var err error
	if sig == syscall.SIGKILL {
		err = p.Kill()
	} else {
		err = p.Signal(sig)
	}
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}
