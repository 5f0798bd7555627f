package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// ScanModelStore lists the models the node's model store holds: one entry
// (a file or a folder) per model, named as the model is named in
// com.openfaas.gpu.model. Hidden entries are left out: the chart's fetch
// Job downloads into a dot-named temporary and renames it when complete,
// so a model half fetched is never reported. A store folder that does not
// exist holds nothing; any other error fails the pass, so the last good
// annotation stays.
func ScanModelStore(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("model store %s: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out, nil
}
