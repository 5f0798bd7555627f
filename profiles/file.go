package profiles

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Version is the only profile file version this build reads and writes.
const Version = "faas-gpu/v1"

// profileFile is the YAML layout documented in docs/profiles.md.
type profileFile struct {
	Version   string  `json:"version"`
	Model     string  `json:"model"`
	GPU       string  `json:"gpu"`
	Memory    string  `json:"memory,omitempty"`
	ModelSize string  `json:"modelSize,omitempty"`
	LoadTime  string  `json:"loadTime,omitempty"`
	Source    string  `json:"source,omitempty"`
	Points    []Point `json:"points"`
}

// Parse decodes and validates one profile file. Unknown or repeated fields
// are errors, so a typo never silently drops a measurement.
func Parse(data []byte) (Profile, error) {
	var f profileFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return Profile{}, fmt.Errorf("decode: %w", err)
	}
	if f.Version != Version {
		return Profile{}, fmt.Errorf("version: want %q, got %q", Version, f.Version)
	}
	p := Profile{Model: f.Model, GPU: f.GPU, Source: f.Source, Points: f.Points}
	var err error
	if p.MemoryBytes, err = parseBytes("memory", f.Memory); err != nil {
		return Profile{}, err
	}
	if p.ModelSizeBytes, err = parseBytes("modelSize", f.ModelSize); err != nil {
		return Profile{}, err
	}
	if f.LoadTime != "" {
		if p.LoadTime, err = time.ParseDuration(f.LoadTime); err != nil || p.LoadTime <= 0 {
			return Profile{}, fmt.Errorf("loadTime: %q is not a positive duration such as 1.5s", f.LoadTime)
		}
	}
	if err := p.validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

func parseBytes(field, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Value() <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive quantity such as 1536Mi or 2Gi", field, v)
	}
	return q.Value(), nil
}

// Marshal writes p in the file format Parse reads. The header is plain
// YAML; points are one flow mapping per line, ordered quota (high first),
// batch, SM, so a file reads as a table and diffs line by line.
func Marshal(p Profile) ([]byte, error) {
	p = p.clone()
	if err := p.validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	header := []struct{ key, value string }{
		{"version", Version},
		{"model", p.Model},
		{"gpu", p.GPU},
		{"memory", formatBytes(p.MemoryBytes)},
		{"modelSize", formatBytes(p.ModelSizeBytes)},
		{"loadTime", formatDuration(p.LoadTime)},
		{"source", p.Source},
	}
	for _, h := range header {
		if h.value == "" {
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", h.key, yamlScalar(h.value))
	}
	slices.SortFunc(p.Points, func(a, b Point) int {
		return cmp.Or(b.Quota-a.Quota, a.Batch-b.Batch, a.SM-b.SM)
	})
	b.WriteString("points:\n")
	for _, pt := range p.Points {
		fmt.Fprintf(&b, "- {batch: %d, sm: %d, quota: %d, latency: %s}\n",
			pt.Batch, pt.SM, pt.Quota, strconv.FormatFloat(pt.Latency, 'f', -1, 64))
	}
	return b.Bytes(), nil
}

// yamlScalar writes s plain when it reads back as the same string (most
// names and sentences), else as a double-quoted JSON string, which YAML
// reads as is. Unlike yaml.Marshal it never folds a long line.
func yamlScalar(s string) string {
	if !strings.ContainsAny(s, "\n\r\t\"'") {
		// Decoding into any, not a string field, so that "true" or "1.5"
		// (a bool and a number to most YAML readers) get quoted.
		var back map[string]any
		if yaml.Unmarshal([]byte("v: "+s), &back) == nil && back["v"] == any(s) {
			return s
		}
	}
	q, _ := json.Marshal(s) // a string always marshals
	return string(q)
}

func formatBytes(n int64) string {
	if n == 0 {
		return ""
	}
	return resource.NewQuantity(n, resource.BinarySI).String()
}

func formatDuration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
