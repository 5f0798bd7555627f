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
// ago: the provider listens on all of them.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
