package sim

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// Config is one comparison: a workload on a cluster under some policies.
type Config struct {
	Workload  *Workload
	Inventory gpu.Inventory
	Catalog   *Catalog
	Policies  []string
	Options   Options
	// Parallel runs up to this many policies at once (0: GOMAXPROCS).
	// Each run is deterministic on its own, so the results do not depend
	// on it.
	Parallel int
}

// RunPolicy simulates one policy.
func RunPolicy(cfg Config, name string) (*Result, error) {
	pol, err := newPolicy(name)
	if err != nil {
		return nil, err
	}
	e, err := newEngine(name, cfg.Workload, cfg.Inventory, cfg.Catalog, cfg.Options)
	if err != nil {
		return nil, err
	}
	e.pol = pol
	if err := e.run(); err != nil {
		return nil, err
	}
	return e.met.result(e), nil
}

// Run simulates every policy of cfg and returns the results in its order.
func Run(cfg Config) ([]*Result, error) {
	if err := cfg.Workload.Validate(); err != nil {
		return nil, err
	}
	par := cfg.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	results := make([]*Result, len(cfg.Policies))
	errs := make([]error, len(cfg.Policies))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, name := range cfg.Policies {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i], errs[i] = RunPolicy(cfg, name)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", cfg.Policies[i], err)
		}
	}
	return results, nil
}
