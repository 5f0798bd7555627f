package profiles

import (
	"embed"
	"fmt"
	"io/fs"
)

// The built-in profiles are the RaPP V100 measurements of 69 torchvision
// models at quota 100, generated from ../shared/data/rapp-v100-latency.csv
// by internal/gen; docs/profiles.md says what was kept and how memory and
// load time were derived.
//
//go:generate go run ./internal/gen -csv ../../shared/data/rapp-v100-latency.csv -out builtin
//go:embed builtin
var builtinFS embed.FS

// Builtin returns a new Store holding the built-in profiles, so
// com.openfaas.gpu.model: resnet50 works with no profile directory. It
// parses the embedded files each time (about 50 ms): call it once.
func Builtin() (*Store, error) {
	sub, err := fs.Sub(builtinFS, "builtin")
	if err != nil {
		return nil, err
	}
	s := NewStore()
	if _, err := s.LoadFS(sub); err != nil {
		return nil, fmt.Errorf("built-in profiles: %w", err)
	}
	return s, nil
}
