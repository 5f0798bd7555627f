// Package testutil holds what the tests that run faas-gpu as a real
// process share: a buffer for a process's output, a free loopback port and
// the check of a profile measured of smfn.
package testutil

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer that a process's output goroutines and the test
// may use at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail is the end of the output, whole lines, at most n bytes: enough of
// a process's log to see why a test failed.
func (l *Buffer) Tail(n int) string {
	s := l.String()
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "[…]\n" + s
}

// FreePort is a TCP port nothing listened on, on any interface, a moment
// ago: the provider listens on all of them. It is never one it returned
// before in this process: its listener is closed before the caller binds
// the port, so two calls a moment apart could be given the same one, and
// a test that asked for two ports (a provider's and its pods') found one
// process holding both (TestStandbyPodOnKubernetes: the provider listened
// on the function port its stand-in pods then could not bind).
func FreePort() (int, error) {
	for range 64 {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if handedOut.take(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("free port: every port the system offered was handed out before")
}

// handedOut is the ports FreePort returned: the one record a test binary
// shares, as the ports themselves are shared by all of its tests.
var handedOut = portSet{ports: map[int]bool{}}

type portSet struct {
	mu    sync.Mutex
	ports map[int]bool
}

// take records port and reports whether it was not recorded before.
func (s *portSet) take(port int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports[port] {
		return false
	}
	s.ports[port] = true
	return true
}
