//go:build !linux

package e2e

import (
	"errors"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return nil }

// processAlive is false for a process that is gone; zombies count as alive
// here, which only makes the orphan check stricter.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
