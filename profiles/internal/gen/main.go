// Command gen writes the built-in profiles of package profiles from the
// RaPP V100 latency table:
//
//	go generate ./profiles/
//
// It keeps only the quotas given with -quotas (faas-gpu runs replicas at
// quota 100), so the embedded data stays small, and removes profile files
// of models the table no longer has. With -table it prints the model
// table of docs/profiles.md instead.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
)

// source is what every built-in profile says about where it comes from.
const source = "latency: RaPP V100 measurements (KontonGu/RaPP, shared/data/rapp-v100-latency.csv), quota %s only; " +
	"memory, modelSize, loadTime: estimated from torchvision num_params %d (docs/profiles.md)"

func main() {
	csvPath := flag.String("csv", "../../shared/data/rapp-v100-latency.csv", "measured table")
	out := flag.String("out", "builtin", "directory to write <model>.yaml into")
	product := flag.String("gpu", gpu.V100Product, "GPU product the table was measured on")
	quotas := flag.String("quotas", "100", "comma-separated time quotas (%) to keep")
	table := flag.Bool("table", false, "print the markdown model table of docs/profiles.md and exit")
	flag.Parse()
	log.SetFlags(0)

	if *table {
		printTable(os.Stdout)
		return
	}
	keep, err := parseQuotas(*quotas)
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Open(*csvPath)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	files, err := Render(f, *product, keep)
	if err != nil {
		log.Fatalf("%s: %v", *csvPath, err)
	}
	if err := write(*out, files); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %d profiles to %s", len(files), *out)
}

// Render converts the table into file name -> contents.
func Render(csv io.Reader, product string, quotas []int) (map[string][]byte, error) {
	imported, err := profiles.ImportCSV(csv, product)
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(imported))
	for _, p := range imported {
		tv, ok := profiles.LookupTorchvision(p.Model)
		if !ok {
			return nil, fmt.Errorf("%s: no parameter count in profiles.TorchvisionModels", p.Model)
		}
		p.Points = slices.DeleteFunc(p.Points, func(pt profiles.Point) bool { return !slices.Contains(quotas, pt.Quota) })
		p.Source = fmt.Sprintf(source, joinInts(quotas), tv.Params)
		data, err := profiles.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Model, err)
		}
		files[p.Model+".yaml"] = data
	}
	return files, nil
}

func write(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, path := range old {
		if _, keep := files[filepath.Base(path)]; !keep {
			if err := os.Remove(path); err != nil {
				return err
			}
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func printTable(w io.Writer) {
	fmt.Fprintln(w, "| model | parameters | source (torchvision `num_params`) | modelSize | memory | loadTime |")
	fmt.Fprintln(w, "| --- | ---: | --- | ---: | ---: | ---: |")
	for _, m := range profiles.TorchvisionModels() {
		fp := profiles.EstimateFootprint(m.Params)
		fmt.Fprintf(w, "| %s | %s | `%s` | %d MiB | %d MiB | %s |\n",
			m.Name, thousands(m.Params), m.Source, fp.ModelSizeBytes>>20, fp.MemoryBytes>>20, fp.LoadTime)
	}
}

func parseQuotas(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		q, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || q < 1 || q > 100 {
			return nil, fmt.Errorf("-quotas: %q is not a percentage 1-100", f)
		}
		out = append(out, q)
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
