// Package cache tracks where models sit in GPU memory: replica by replica
// (live replicas and idle warm ones kept after a scale-down), and which
// models each node loaded recently, a second tier that loads faster than a
// cold start. It counts hits, misses and evictions. It is pure: time comes
// in as an argument.
package cache

import (
	"container/list"
	"sort"
	"sync"
	"time"
)

// Outcome says where a model came from when a request needed it.
type Outcome int

const (
	// Hit: the model was in the replica's GPU memory.
	Hit Outcome = iota
	// NodeHit: not in GPU memory, but the node loaded it recently (host
	// memory or local disk), so the load is cheaper than cold.
	NodeHit
	// Miss: loaded cold.
	Miss
)

func (o Outcome) String() string {
	switch o {
	case Hit:
		return "hit"
	case NodeHit:
		return "node-hit"
	default:
		return "miss"
	}
}

// Stats are the cache's counters since it was made.
type Stats struct {
	Hits     uint64 `json:"hits"`
	NodeHits uint64 `json:"nodeHits"`
	Misses   uint64 `json:"misses"`
	// ModelEvictions counts models dropped from a replica's memory to make
	// room for another model.
	ModelEvictions uint64 `json:"modelEvictions"`
	// ReplicaEvictions counts idle warm replicas stopped to free GPU memory.
	ReplicaEvictions uint64 `json:"replicaEvictions"`
	// Expirations counts idle warm replicas stopped after their TTL.
	Expirations uint64 `json:"expirations"`
}

// Options bound the node tier.
type Options struct {
	// NodeModels is how many models a node remembers (LRU).
	NodeModels int
	// NodeTTL is how long a load counts as recent.
	NodeTTL time.Duration
}

// DefaultOptions remember 64 models per node for 30 minutes: about what a
// node's page cache keeps of model files between bursts.
var DefaultOptions = Options{NodeModels: 64, NodeTTL: 30 * time.Minute}

type model struct {
	name  string
	bytes int64
}

type replica struct {
	id, gpu, node string
	capacity      int64
	used          int64
	lru           *list.List // of *model, most recent first
	byName        map[string]*list.Element
	idle          bool
	idleSince     time.Time
}

type nodeTier struct {
	lru    *list.List // of *nodeModel, most recent first
	byName map[string]*list.Element
}

type nodeModel struct {
	name     string
	loadedAt time.Time
}

// Cache is safe for concurrent use: the router reads it per request while
// the scheduler changes it.
type Cache struct {
	opts     Options
	mu       sync.Mutex
	replicas map[string]*replica
	nodes    map[string]*nodeTier
	// stores are the models each node's model store holds, as its agent
	// reports them: on the node for as long as the report says so, with
	// no TTL and outside the LRU bound.
	stores map[string]map[string]bool
	// onGPU counts, per model and GPU, the replicas holding the model, so
	// placement asks "where is this model" once, not per replica.
	onGPU map[string]map[string]int
	stats Stats
}

// New makes an empty cache.
func New(opts Options) *Cache {
	if opts.NodeModels <= 0 {
		opts.NodeModels = DefaultOptions.NodeModels
	}
	if opts.NodeTTL <= 0 {
		opts.NodeTTL = DefaultOptions.NodeTTL
	}
	return &Cache{opts: opts, replicas: map[string]*replica{}, nodes: map[string]*nodeTier{}, stores: map[string]map[string]bool{}, onGPU: map[string]map[string]int{}}
}

// AddReplica starts tracking a replica on gpu of node whose memory limit
// holds capacity bytes of models.
func (c *Cache) AddReplica(id, gpu, node string, capacity int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replicas[id] = &replica{id: id, gpu: gpu, node: node, capacity: capacity, lru: list.New(), byName: map[string]*list.Element{}}
}

// SetCapacity changes how many bytes of models a replica can hold, as when
// the CUDA context's share of its memory becomes known.
func (c *Cache) SetCapacity(id string, capacity int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.replicas[id]; ok {
		r.capacity = capacity
	}
}

// RemoveReplica forgets a replica. Its models stay in the node tier: the
// node just had them.
func (c *Cache) RemoveReplica(id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replicas[id]
	if !ok {
		return
	}
	for e := r.lru.Back(); e != nil; e = e.Prev() {
		name := e.Value.(*model).name
		c.rememberLocked(r.node, name, now)
		c.unindexLocked(name, r.gpu)
	}
	delete(c.replicas, id)
}

// Preload records a model a replica loads at start (its own model), as a
// request would, and returns where it came from.
func (c *Cache) Preload(id, name string, bytes int64, now time.Time) Outcome {
	o, _ := c.Use(id, name, bytes, now)
	return o
}

// Fill records that replica id loaded model name (bytes) into room it had
// free, ahead of any request for it (a load the provider asked for in the
// replica's idle time, docs/replica-protocol.md): nothing is evicted and
// no hit, miss or load is counted, as no request waited. It reports false,
// holding nothing more, where the replica is not tracked or the model
// does not fit what it holds.
func (c *Cache) Fill(id, name string, bytes int64, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replicas[id]
	if !ok {
		return false
	}
	if _, held := r.byName[name]; held {
		return true
	}
	if r.used+bytes > r.capacity {
		return false
	}
	// Least recently used of what it holds: no request asked for it yet.
	c.holdLocked(r, name, bytes, false, now)
	return true
}

// holdLocked puts model name (bytes) in replica r's memory, most recently
// used (front) or least, and indexes it on r's GPU and node.
func (c *Cache) holdLocked(r *replica, name string, bytes int64, front bool, now time.Time) {
	m := &model{name: name, bytes: bytes}
	if front {
		r.byName[name] = r.lru.PushFront(m)
	} else {
		r.byName[name] = r.lru.PushBack(m)
	}
	r.used += bytes
	if c.onGPU[name] == nil {
		c.onGPU[name] = map[string]int{}
	}
	c.onGPU[name][r.gpu]++
	c.rememberLocked(r.node, name, now)
}

// Use records that replica id serves model name (bytes in GPU memory): a
// hit if resident, otherwise a load from the node tier or cold, evicting
// the replica's least recently used models until the new one fits. It
// returns the outcome and the evicted models.
func (c *Cache) Use(id, name string, bytes int64, now time.Time) (Outcome, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replicas[id]
	if !ok {
		c.stats.Misses++
		return Miss, nil
	}
	if e, ok := r.byName[name]; ok {
		r.lru.MoveToFront(e)
		c.stats.Hits++
		return Hit, nil
	}
	outcome := Miss
	if c.onNodeLocked(r.node, name, now) {
		outcome = NodeHit
		c.stats.NodeHits++
	} else {
		c.stats.Misses++
	}
	var evicted []string
	for r.used+bytes > r.capacity && r.lru.Len() > 0 {
		e := r.lru.Back()
		m := e.Value.(*model)
		r.lru.Remove(e)
		delete(r.byName, m.name)
		r.used -= m.bytes
		c.unindexLocked(m.name, r.gpu)
		evicted = append(evicted, m.name)
		c.stats.ModelEvictions++
	}
	c.holdLocked(r, name, bytes, true, now)
	return outcome, evicted
}

// Report sets replica id's resident models to what the replica says it
// holds (docs/replica-protocol.md), most recently used first: the
// replica knows, so its list replaces what the cache assumed. A model it
// held before keeps its size; one new to the cache counts 0 bytes, as the
// report names no size. It is an observation, not a request: no hit, miss
// or eviction is counted. The node tier remembers every model reported,
// as the node just had it. It reports false for a replica not tracked.
func (c *Cache) Report(id string, models []string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replicas[id]
	if !ok {
		return false
	}
	sizes := make(map[string]int64, r.lru.Len())
	for e := r.lru.Front(); e != nil; e = e.Next() {
		m := e.Value.(*model)
		sizes[m.name] = m.bytes
		c.unindexLocked(m.name, r.gpu)
	}
	r.lru.Init()
	r.byName = make(map[string]*list.Element, len(models))
	r.used = 0
	// Remembered least recent first, so the node tier's order matches.
	for i := len(models) - 1; i >= 0; i-- {
		name := models[i]
		if name == "" {
			continue
		}
		if e, dup := r.byName[name]; dup {
			r.lru.MoveToFront(e)
			continue
		}
		c.holdLocked(r, name, sizes[name], true, now)
	}
	return true
}

// Holds reports whether replica id has model name in GPU memory.
func (c *Cache) Holds(id, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replicas[id]
	if !ok {
		return false
	}
	_, ok = r.byName[name]
	return ok
}

// Models lists a replica's resident models, most recently used first.
func (c *Cache) Models(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.replicas[id]
	if !ok {
		return nil
	}
	out := make([]string, 0, r.lru.Len())
	for e := r.lru.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*model).name)
	}
	return out
}

// ModelCount is how many models replica id holds, without listing them:
// the proxy asks it per request.
func (c *Cache) ModelCount(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.replicas[id]; ok {
		return r.lru.Len()
	}
	return 0
}

// SetIdle takes a replica out of service but keeps its models warm.
func (c *Cache) SetIdle(id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.replicas[id]; ok && !r.idle {
		r.idle, r.idleSince = true, now
	}
}

// SetActive puts an idle warm replica back in service.
func (c *Cache) SetActive(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.replicas[id]; ok {
		r.idle = false
	}
}

// IdleReplica is an idle warm replica.
type IdleReplica struct {
	ID, GPU, Node string
	Since         time.Time
	Bytes         int64
}

// Idle lists idle warm replicas on gpu ("" for all), least recently idled
// first: the order to evict them in.
func (c *Cache) Idle(gpu string) []IdleReplica {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []IdleReplica
	for _, r := range c.replicas {
		if r.idle && (gpu == "" || r.gpu == gpu) {
			out = append(out, IdleReplica{ID: r.id, GPU: r.gpu, Node: r.node, Since: r.idleSince, Bytes: r.used})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Since.Equal(out[j].Since) {
			return out[i].Since.Before(out[j].Since)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// IdleHolding lists idle warm replicas whose memory holds model name, most
// recently idled first: the ones a scale-up reuses.
func (c *Cache) IdleHolding(name string) []IdleReplica {
	all := c.Idle("")
	var out []IdleReplica
	for i := len(all) - 1; i >= 0; i-- {
		if c.Holds(all[i].ID, name) {
			out = append(out, all[i])
		}
	}
	return out
}

// Expired lists idle warm replicas idle for ttl or longer.
func (c *Cache) Expired(now time.Time, ttl time.Duration) []string {
	var out []string
	for _, r := range c.Idle("") {
		if now.Sub(r.Since) >= ttl {
			out = append(out, r.ID)
		}
	}
	return out
}

// CountEviction records that an idle warm replica was stopped to free
// memory (expired=false) or after its TTL (expired=true).
func (c *Cache) CountEviction(expired bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if expired {
		c.stats.Expirations++
	} else {
		c.stats.ReplicaEvictions++
	}
}

func (c *Cache) unindexLocked(name, gpu string) {
	if m := c.onGPU[name]; m != nil {
		if m[gpu]--; m[gpu] <= 0 {
			delete(m, gpu)
		}
		if len(m) == 0 {
			delete(c.onGPU, name)
		}
	}
}

// ResidentOnGPU reports whether any replica on gpu holds model name.
func (c *Cache) ResidentOnGPU(gpu, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.onGPU[name][gpu] > 0
}

// Locality is where a model is: the GPUs holding it and the nodes that
// loaded it recently.
type Locality struct {
	GPUs  map[string]bool
	Nodes map[string]bool
}

// Where answers, in one call, where model name is at time now.
func (c *Cache) Where(name string, now time.Time) Locality {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := Locality{GPUs: map[string]bool{}, Nodes: map[string]bool{}}
	for g := range c.onGPU[name] {
		l.GPUs[g] = true
	}
	for node := range c.nodes {
		if c.onNodeLocked(node, name, now) {
			l.Nodes[node] = true
		}
	}
	for node, models := range c.stores {
		if models[name] {
			l.Nodes[node] = true
		}
	}
	return l
}

// SetNodeStore replaces what node's model store holds (nil or empty: no
// store, or an empty one). A model there counts as on the node until a
// later report leaves it out: the store is a fact the node reports, not a
// guess from a recent load, so it never expires.
func (c *Cache) SetNodeStore(node string, models []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(models) == 0 {
		delete(c.stores, node)
		return
	}
	set := make(map[string]bool, len(models))
	for _, m := range models {
		set[m] = true
	}
	c.stores[node] = set
}

// OnNode reports whether node's model store holds model name, or the node
// loaded it within the TTL.
func (c *Cache) OnNode(node, name string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.onNodeLocked(node, name, now)
}

func (c *Cache) onNodeLocked(node, name string, now time.Time) bool {
	if c.stores[node][name] {
		return true
	}
	t, ok := c.nodes[node]
	if !ok {
		return false
	}
	e, ok := t.byName[name]
	return ok && now.Sub(e.Value.(*nodeModel).loadedAt) < c.opts.NodeTTL
}

func (c *Cache) rememberLocked(node, name string, now time.Time) {
	t, ok := c.nodes[node]
	if !ok {
		t = &nodeTier{lru: list.New(), byName: map[string]*list.Element{}}
		c.nodes[node] = t
	}
	if e, ok := t.byName[name]; ok {
		e.Value.(*nodeModel).loadedAt = now
		t.lru.MoveToFront(e)
		return
	}
	t.byName[name] = t.lru.PushFront(&nodeModel{name: name, loadedAt: now})
	for t.lru.Len() > c.opts.NodeModels {
		e := t.lru.Back()
		t.lru.Remove(e)
		delete(t.byName, e.Value.(*nodeModel).name)
	}
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
