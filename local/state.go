package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

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
//	<dir>/quarantine/...              records that could not be read, kept aside
//	                                  under their own relative path plus the time
type stateStore struct {
	dir  string
	lock *os.File
	// writes counts the files written: a write is an fsync of the file and
	// of its directory, the cost that must not grow with the functions.
	writes atomic.Uint64
	// writeFile is writeFileAtomic and removeFile os.Remove; tests put
	// failing ones in their place.
	writeFile  func(path string, data []byte, perm os.FileMode) error
	removeFile func(path string) error
}

// quarantined is a record that could not be read at start-up, moved aside.
type quarantined struct {
	path string // where it was
	to   string // where it is now; "" when it could not be moved
	err  error  // why it was unreadable
}

// loadedRecord is a function record with the bytes it was read from, so a
// restart can tell a record that changed from one that did not.
type loadedRecord struct {
	functionRecord
	raw []byte
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
	return &stateStore{dir: dir, lock: lock, writeFile: writeFileAtomic, removeFile: os.Remove}, nil
}

// write replaces path with data through writeFile and counts it.
func (s *stateStore) write(path string, data []byte, perm os.FileMode) error {
	s.writes.Add(1)
	return s.writeFile(path, data, perm)
}

// quarantine moves the unreadable file at path into the quarantine folder,
// under the same relative path plus a timestamp, so that nothing is lost
// and the next start does not trip on it again.
func (s *stateStore) quarantine(path string, cause error) quarantined {
	q := quarantined{path: path, err: cause}
	rel, err := filepath.Rel(s.dir, path)
	if err != nil {
		rel = filepath.Base(path)
	}
	to := filepath.Join(s.dir, "quarantine", rel) + "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		q.err = fmt.Errorf("%w (and not moved aside: %v)", cause, err)
		return q
	}
	if err := os.Rename(path, to); err != nil {
		q.err = fmt.Errorf("%w (and not moved aside: %v)", cause, err)
		return q
	}
	q.to = to
	return q
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

// encodeRecord is a record as saveFunction writes it; equal records encode
// to equal bytes (struct fields in order, map keys sorted).
func encodeRecord(rec functionRecord) ([]byte, error) {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode function %s: %w", rec.Function.Name(), err)
	}
	return data, nil
}

// saveFunction writes the encoded record of function ns/name.
func (s *stateStore) saveFunction(ns, name string, data []byte) error {
	if err := s.write(s.functionPath(ns, name), data, 0o600); err != nil {
		return fmt.Errorf("save function %s.%s: %w", name, ns, err)
	}
	return nil
}

func (s *stateStore) deleteFunction(ns, name string) error {
	if err := s.removeFile(s.functionPath(ns, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete function %s.%s: %w", name, ns, err)
	}
	return nil
}

// loadFunctions reads every function record, oldest first. A record that
// cannot be read or does not describe the function its path names is moved
// to the quarantine folder and reported, not returned: one bad file must
// not keep every other function down.
func (s *stateStore) loadFunctions() ([]loadedRecord, []quarantined, error) {
	paths, err := filepath.Glob(filepath.Join(s.dir, "functions", "*", "*.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("list function records: %w", err)
	}
	var out []loadedRecord
	var bad []quarantined
	for _, p := range paths {
		rec, err := readRecord(p)
		if err != nil {
			bad = append(bad, s.quarantine(p, err))
			continue
		}
		out = append(out, rec)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, bad, nil
}

// readRecord reads the function record at p, <ns>/<name>.json, and checks
// that it is that function's.
func readRecord(p string) (loadedRecord, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return loadedRecord{}, fmt.Errorf("read: %w", err)
	}
	var rec functionRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return loadedRecord{}, fmt.Errorf("decode: %w", err)
	}
	ns, name := filepath.Base(filepath.Dir(p)), strings.TrimSuffix(filepath.Base(p), ".json")
	if rec.Function.Namespace() != ns || rec.Function.Name() != name {
		return loadedRecord{}, fmt.Errorf("the record is of function %q in namespace %q, not %s.%s", rec.Function.Name(), rec.Function.Namespace(), name, ns)
	}
	return loadedRecord{functionRecord: rec, raw: data}, nil
}

func (s *stateStore) saveNamespaces(nss map[string]types.FunctionNamespace) error {
	data, err := json.MarshalIndent(nss, "", "  ")
	if err != nil {
		return err
	}
	if err := s.write(filepath.Join(s.dir, "namespaces.json"), data, 0o600); err != nil {
		return fmt.Errorf("save namespaces: %w", err)
	}
	return nil
}

// loadNamespaces reads the namespaces. An unreadable file is moved to the
// quarantine folder and reported, and no namespace comes back from it: the
// caller rebuilds what it can from the functions and secrets on disk.
func (s *stateStore) loadNamespaces() (map[string]types.FunctionNamespace, *quarantined, error) {
	p := filepath.Join(s.dir, "namespaces.json")
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]types.FunctionNamespace{}, nil, nil
	}
	if err == nil {
		nss := map[string]types.FunctionNamespace{}
		if err = json.Unmarshal(data, &nss); err == nil {
			return nss, nil, nil
		}
		err = fmt.Errorf("decode: %w", err)
	} else {
		err = fmt.Errorf("read: %w", err)
	}
	q := s.quarantine(p, err)
	return map[string]types.FunctionNamespace{}, &q, nil
}

// secretNamespaces names the namespaces that hold secrets.
func (s *stateStore) secretNamespaces() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "secrets"))
	if err != nil {
		return nil, fmt.Errorf("list secret namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (s *stateStore) secretPath(ns, name string) string {
	return filepath.Join(s.dir, "secrets", ns, name)
}

func (s *stateStore) writeSecret(ns, name string, value []byte) error {
	if err := s.write(s.secretPath(ns, name), value, 0o600); err != nil {
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
