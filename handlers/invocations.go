package handlers

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Invocations counts the requests the proxy forwarded to each function, for
// invocationCount in the function status.
type Invocations struct {
	counts sync.Map // "namespace/name" -> *atomic.Uint64
}

func invocationKey(ns, name string) string { return ns + "/" + name }

// Add counts one invocation.
func (i *Invocations) Add(ns, name string) {
	c, ok := i.counts.Load(invocationKey(ns, name))
	if !ok {
		c, _ = i.counts.LoadOrStore(invocationKey(ns, name), new(atomic.Uint64))
	}
	c.(*atomic.Uint64).Add(1)
}

// Count is the number of invocations so far.
func (i *Invocations) Count(ns, name string) float64 {
	if c, ok := i.counts.Load(invocationKey(ns, name)); ok {
		return float64(c.(*atomic.Uint64).Load())
	}
	return 0
}

// Forget drops a deleted function's count.
func (i *Invocations) Forget(ns, name string) { i.counts.Delete(invocationKey(ns, name)) }

// Range calls f for every function with a count.
func (i *Invocations) Range(f func(ns, name string, count uint64)) {
	i.counts.Range(func(k, v any) bool {
		ns, name, _ := strings.Cut(k.(string), "/")
		f(ns, name, v.(*atomic.Uint64).Load())
		return true
	})
}
