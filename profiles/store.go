package profiles

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"sync"
)

// ErrNoProfile says a model has no profile for any GPU product: how a
// caller reports a Lookup that finds nothing.
var ErrNoProfile = errors.New("no profile")

// Fallback says that a lookup for one GPU product was answered with a
// profile measured on another. The zero value means no fallback.
type Fallback struct {
	// Requested is the product the caller asked for.
	Requested string
	// Measured is the product the returned profile was measured on.
	Measured string
}

// Used reports whether the profile came from another product.
func (f Fallback) Used() bool { return f.Measured != "" }

func (f Fallback) String() string {
	if !f.Used() {
		return ""
	}
	return "fallback: profile measured on " + f.Measured
}

// Store holds profiles keyed by (model, GPU product). It is safe for
// concurrent use; the profiles it hands out must not be modified.
type Store struct {
	mu       sync.RWMutex
	profiles map[string]map[string]*Profile // model -> product -> profile
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{profiles: map[string]map[string]*Profile{}}
}

// Add validates p and stores a copy of it, replacing any profile of the
// same model and product: a user's profile directory overrides the
// built-in profiles.
func (s *Store) Add(p Profile) error {
	p = p.clone()
	if err := p.validate(); err != nil {
		return fmt.Errorf("profile %s: %w", p.Model, err)
	}
	s.put(&p)
	return nil
}

// put stores a validated profile that nothing else holds.
func (s *Store) put(p *Profile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.profiles[p.Model] == nil {
		s.profiles[p.Model] = map[string]*Profile{}
	}
	s.profiles[p.Model][p.GPU] = p
}

// Lookup returns the profile of model measured on product. When there is
// none, it returns the model's profile from another product, and the
// Fallback says which, so the decision can say so; among several other
// products the first by name is taken, for determinism. ok is false when
// the model has no profile at all.
func (s *Store) Lookup(model, product string) (p *Profile, fb Fallback, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	byProduct := s.profiles[model]
	if exact := byProduct[product]; exact != nil {
		return exact, Fallback{}, true
	}
	if len(byProduct) == 0 {
		return nil, Fallback{}, false
	}
	// The first other product by name, found without sorting: the proxy
	// looks models up per dispatch (LoadSeconds).
	other := ""
	for k := range byProduct {
		if other == "" || k < other {
			other = k
		}
	}
	return byProduct[other], Fallback{Requested: product, Measured: other}, true
}

// LoadSeconds is model's profiled load time on product (Lookup's
// fallback included), in seconds; 0 where it has no profile, or s is nil.
func (s *Store) LoadSeconds(model, product string) float64 {
	if s == nil {
		return 0
	}
	if p, _, ok := s.Lookup(model, product); ok {
		return p.LoadTime.Seconds()
	}
	return 0
}

// Models lists the models that have at least one profile, sorted.
func (s *Store) Models() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.profiles))
}

// Products lists the GPU products model was measured on, sorted.
func (s *Store) Products(model string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.profiles[model]))
}

// Len is the number of profiles held.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, byProduct := range s.profiles {
		n += len(byProduct)
	}
	return n
}

// LoadDir adds every *.yaml and *.yml file of dir (not its
// subdirectories) and returns how many profiles it added.
func (s *Store) LoadDir(dir string) (int, error) {
	n, err := s.LoadFS(os.DirFS(dir))
	if err != nil {
		return n, fmt.Errorf("profiles %s: %w", dir, err)
	}
	return n, nil
}

// LoadFS is LoadDir on the root of fsys. Two files of the same model and
// product are an error: which one wins would depend on file names.
// Nothing is added unless every file is valid.
func (s *Store) LoadFS(fsys fs.FS) (int, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return 0, err
	}
	var loaded []Profile
	from := map[[2]string]string{}
	for _, e := range entries {
		ext := path.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		data, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return 0, err
		}
		p, err := Parse(data)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", e.Name(), err)
		}
		key := [2]string{p.Model, p.GPU}
		if other, dup := from[key]; dup {
			return 0, fmt.Errorf("%s: model %q on %q is also in %s", e.Name(), p.Model, p.GPU, other)
		}
		from[key] = e.Name()
		loaded = append(loaded, p)
	}
	for i := range loaded {
		s.put(&loaded[i]) // Parse validated it and owns its Points
	}
	return len(loaded), nil
}
