package profiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func profileOn(model, product string, latency float64) Profile {
	return Profile{Model: model, GPU: product, Points: []Point{{Batch: 1, SM: 10, Quota: 100, Latency: latency}}}
}

func withLoad(p Profile, d time.Duration) Profile {
	p.LoadTime = d
	return p
}

func TestStoreLookup(t *testing.T) {
	s := NewStore()
	for _, p := range []Profile{
		profileOn("resnet50", "V100", 20),
		profileOn("resnet50", "T4", 40),
		withLoad(profileOn("resnet50", "A100", 10), 2*time.Second),
		profileOn("vgg16", "V100", 5),
	} {
		if err := s.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, model, product string
		ok                   bool
		measured             string
		fallback             bool
	}{
		{"exact", "resnet50", "T4", true, "T4", false},
		{"fallback takes the first other product by name", "resnet50", "H200", true, "A100", true},
		{"only product", "vgg16", "T4", true, "V100", true},
		{"unknown model", "bert", "V100", false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, fb, ok := s.Lookup(tt.model, tt.product)
			if ok != tt.ok {
				t.Fatalf("ok = %v", ok)
			}
			if !ok {
				if p != nil || fb.Used() {
					t.Errorf("a miss returned %v %v", p, fb)
				}
				return
			}
			if p.GPU != tt.measured || fb.Used() != tt.fallback {
				t.Errorf("got the %s profile, fallback %+v", p.GPU, fb)
			}
			if tt.fallback && (fb.Requested != tt.product || fb.Measured != tt.measured ||
				fb.String() != "fallback: profile measured on "+tt.measured) {
				t.Errorf("fallback = %+v %q", fb, fb)
			}
		})
	}
	for _, tt := range []struct {
		model, product string
		want           float64
	}{{"resnet50", "A100", 2}, {"resnet50", "H200", 2}, {"resnet50", "T4", 0}, {"bert", "V100", 0}} {
		if got := s.LoadSeconds(tt.model, tt.product); got != tt.want {
			t.Errorf("LoadSeconds(%s, %s) = %v, want %v", tt.model, tt.product, got, tt.want)
		}
	}
	if got := (*Store)(nil).LoadSeconds("resnet50", "A100"); got != 0 {
		t.Errorf("a nil store's LoadSeconds = %v, want 0", got)
	}
	if got := strings.Join(s.Models(), ","); got != "resnet50,vgg16" {
		t.Errorf("Models() = %s", got)
	}
	if got := strings.Join(s.Products("resnet50"), ","); got != "A100,T4,V100" {
		t.Errorf("Products(resnet50) = %s", got)
	}
	if s.Len() != 4 {
		t.Errorf("Len() = %d", s.Len())
	}
}

func TestStoreAdd(t *testing.T) {
	s := NewStore()
	p := profileOn("m", "g", 20)
	if err := s.Add(p); err != nil {
		t.Fatal(err)
	}
	p.Points[0].Latency = 1 // the caller's slice is not the Store's
	got, _, _ := s.Lookup("m", "g")
	if got.Points[0].Latency != 20 {
		t.Error("Add kept the caller's Points")
	}
	if err := s.Add(profileOn("m", "g", 30)); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Lookup("m", "g"); got.Points[0].Latency != 30 || s.Len() != 1 {
		t.Errorf("Add did not replace: %v, %d profiles", got.Points, s.Len())
	}
	err := s.Add(Profile{Model: "m", GPU: "g"})
	if err == nil || !strings.Contains(err.Error(), "profile m: points") {
		t.Errorf("Add(no points) = %v", err)
	}
}

func writeProfile(t *testing.T, dir, name string, p Profile) {
	t.Helper()
	data, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeProfile(t, dir, "a.yaml", profileOn("a", "V100", 1))
	writeProfile(t, dir, "b.yml", profileOn("b", "V100", 1))
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# not a profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "old.yaml"), 0o755); err != nil { // a directory, skipped
		t.Fatal(err)
	}
	s := NewStore()
	n, err := s.LoadDir(dir)
	if err != nil || n != 2 {
		t.Fatalf("LoadDir = %d, %v", n, err)
	}
	if got := strings.Join(s.Models(), ","); got != "a,b" {
		t.Errorf("Models() = %s", got)
	}
}

func TestLoadDirErrors(t *testing.T) {
	t.Run("invalid file names the file", func(t *testing.T) {
		dir := t.TempDir()
		writeProfile(t, dir, "a.yaml", profileOn("a", "V100", 1))
		if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("version: faas-gpu/v1\nmodel: b\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s := NewStore()
		_, err := s.LoadDir(dir)
		if err == nil || !strings.Contains(err.Error(), "bad.yaml: gpu") {
			t.Fatalf("err = %v", err)
		}
		if s.Len() != 0 {
			t.Error("a failed LoadDir added profiles")
		}
	})
	t.Run("same model and product twice", func(t *testing.T) {
		dir := t.TempDir()
		writeProfile(t, dir, "a.yaml", profileOn("a", "V100", 1))
		writeProfile(t, dir, "a-copy.yaml", profileOn("a", "V100", 2))
		_, err := NewStore().LoadDir(dir)
		if err == nil || !strings.Contains(err.Error(), "also in") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		_, err := NewStore().LoadDir(filepath.Join(t.TempDir(), "nope"))
		if err == nil || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("err = %v", err)
		}
	})
}

// Run with -race: lookups while profiles are replaced.
func TestStoreConcurrent(t *testing.T) {
	s := NewStore()
	if err := s.Add(profileOn("m", "g", 1)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range 50 {
				if err := s.Add(profileOn(fmt.Sprintf("m%d", i), "g", float64(j+1))); err != nil {
					t.Error(err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 50 {
				p, _, ok := s.Lookup("m", "other")
				if !ok {
					t.Error("lost m")
					return
				}
				if _, _, err := p.SliceLatency(1, 10); err != nil {
					t.Error(err)
				}
				_ = s.Models()
			}
		}()
	}
	wg.Wait()
}
