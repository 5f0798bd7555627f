package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// The committed built-in profiles are what the generator makes from the
// table today: run go generate ./profiles/ after changing either.
func TestBuiltinUpToDate(t *testing.T) {
	table := filepath.Join("..", "..", "..", "..", "shared", "data", "rapp-v100-latency.csv")
	f, err := os.Open(table)
	if os.IsNotExist(err) {
		t.Skipf("%s not found: the RaPP table lives beside the repository", table)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files, err := Render(f, gpu.V100Product, []int{100})
	if err != nil {
		t.Fatal(err)
	}
	committed, err := filepath.Glob(filepath.Join("..", "..", "builtin", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, path := range committed {
		names = append(names, filepath.Base(path))
	}
	if want := slices.Sorted(maps.Keys(files)); !slices.Equal(names, want) {
		t.Fatalf("committed files %v, generator makes %v", names, want)
	}
	for _, path := range committed {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != string(files[filepath.Base(path)]) {
			t.Errorf("%s is stale: run go generate ./profiles/", path)
		}
	}
}

func TestParseQuotas(t *testing.T) {
	if got, err := parseQuotas("100, 50"); err != nil || !slices.Equal(got, []int{100, 50}) {
		t.Errorf("parseQuotas = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "101", "x"} {
		if _, err := parseQuotas(bad); err == nil {
			t.Errorf("parseQuotas(%q) accepted", bad)
		}
	}
}
