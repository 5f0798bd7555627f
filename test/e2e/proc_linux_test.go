//go:build linux

package e2e

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// childAttr has the kernel kill a process the test started if the test
// binary dies first (go test's timeout, a panic), so no provider or gateway
// outlives its test and holds ports 8080/8082.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// processAlive is false for a process that is gone or a zombie (a killed
// orphan may wait a while for its new parent to reap it).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}
