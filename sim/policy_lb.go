package sim

import "time"

// lbFamily is the GPU-enabled FaaS paper's system (Zhao, Jha, Hong,
// "GPU-enabled Function-as-a-Service for Machine Learning Inference",
// arXiv 2303.05601; research notes §2): OpenFaaS with every GPU a worker
// that runs one request at a time on the whole GPU and keeps the models it
// loaded in GPU memory (LRU, cache.Cache), all GPUs in service for the
// whole run (the paper scales no workers), one central queue dispatched by
// LB, LALB or LALB+O3 (see dispatcher). A worker's cache holds what its
// GPU's memory holds after one CUDA context (a single process loads every
// model, the paper's "global management of GPU memories"). Requests run at
// batch 1, as in the paper.
type lbFamily struct {
	workers []*replica
	d       dispatcher
}

func newLBFamily(mode dispatchMode) *lbFamily { return &lbFamily{d: dispatcher{mode: mode}} }

func (p *lbFamily) start(e *Engine) error {
	p.d.bound = e.opts.LocalityBound
	for _, g := range e.gpus {
		w := e.newReplica(-1, -1)
		w.sm, w.share, w.mem = 100, fullShare, g.dev.MemoryBytes
		e.launch(w, g, g.dev.MemoryBytes-contextBytes, true, false)
		p.workers = append(p.workers, w)
	}
	return nil
}

func (p *lbFamily) arrive(e *Engine, n int32)   { p.d.arrive(e, p.workers, n) }
func (p *lbFamily) ready(e *Engine, _ *replica) { p.d.drain(e, p.workers) }
func (p *lbFamily) idle(e *Engine, _ *replica)  { p.d.drain(e, p.workers) }
func (p *lbFamily) tick(*Engine)                {}
func (p *lbFamily) compute(e *Engine, _ *replica, m int, _ int) time.Duration {
	return e.models[m].fullLat
}
