package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/openfaas/faas-provider/types"
)

// stateStore keeps functions, placements, namespaces and secrets on disk so
// a restart, even after kill -9, loses nothing. Every write replaces a file
// atomically (temp file, fsync, rename, fsync of the directory).
//
//	<dir>/lock                        flock: one provider per state dir
//	<dir>/namespaces.json
//	<dir>/functions/<ns>/<name>.json  functionRecord
//	<dir>/secrets/<ns>/<name>         the value, mode 0600
//	<dir>/replicas/<id>/              a running replica's work dir (wiped at start)
type stateStore struct {
	dir  string
	lock *os.File
}

// functionRecord is what the state dir keeps of a function: the core's
// record, as JSON.
type functionRecord = lifecycle.Record

func openState(dir string) (*stateStore, error) {
	for _, d := range []string{dir, filepath.Join(dir, "functions"), filepath.Join(dir, "secrets"), filepath.Join(dir, "replicas")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("state dir %s is in use by another faas-gpu: %w", dir, err)
	}
	// Replica work dirs belong to processes of an earlier run, all gone now.
	if err := os.RemoveAll(filepath.Join(dir, "replicas")); err != nil {
		return nil, fmt.Errorf("clean replica dirs: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "replicas"), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &stateStore{dir: dir, lock: lock}, nil
}

func (s *stateStore) close() error { return s.lock.Close() }

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *stateStore) functionPath(ns, name string) string {
	return filepath.Join(s.dir, "functions", ns, name+".json")
}

func (s *stateStore) saveFunction(rec functionRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode function %s: %w", rec.Function.Name(), err)
	}
	if err := writeFileAtomic(s.functionPath(rec.Function.Namespace(), rec.Function.Name()), data, 0o600); err != nil {
		return fmt.Errorf("save function %s: %w", rec.Function.Name(), err)
	}
	return nil
}

func (s *stateStore) deleteFunction(ns, name string) error {
	if err := os.Remove(s.functionPath(ns, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete function %s: %w", name, err)
	}
	return nil
}

// loadFunctions reads every function record, oldest first.
func (s *stateStore) loadFunctions() ([]functionRecord, error) {
	paths, err := filepath.Glob(filepath.Join(s.dir, "functions", "*", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []functionRecord
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", p, err)
		}
		var rec functionRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("load %s: %w", p, err)
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (s *stateStore) saveNamespaces(nss map[string]types.FunctionNamespace) error {
	data, err := json.MarshalIndent(nss, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(s.dir, "namespaces.json"), data, 0o600); err != nil {
		return fmt.Errorf("save namespaces: %w", err)
	}
	return nil
}

func (s *stateStore) loadNamespaces() (map[string]types.FunctionNamespace, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, "namespaces.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]types.FunctionNamespace{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load namespaces: %w", err)
	}
	nss := map[string]types.FunctionNamespace{}
	if err := json.Unmarshal(data, &nss); err != nil {
		return nil, fmt.Errorf("load namespaces: %w", err)
	}
	return nss, nil
}

func (s *stateStore) secretPath(ns, name string) string {
	return filepath.Join(s.dir, "secrets", ns, name)
}

func (s *stateStore) writeSecret(ns, name string, value []byte) error {
	if err := writeFileAtomic(s.secretPath(ns, name), value, 0o600); err != nil {
		return fmt.Errorf("save secret %s: %w", name, err)
	}
	return nil
}

func (s *stateStore) readSecret(ns, name string) ([]byte, error) {
	return os.ReadFile(s.secretPath(ns, name))
}

func (s *stateStore) secretExists(ns, name string) bool {
	_, err := os.Stat(s.secretPath(ns, name))
	return err == nil
}

func (s *stateStore) deleteSecret(ns, name string) error {
	return os.Remove(s.secretPath(ns, name))
}

func (s *stateStore) listSecrets(ns string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "secrets", ns))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name()[0] != '.' {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (s *stateStore) replicaDir(id string) string { return filepath.Join(s.dir, "replicas", id) }
