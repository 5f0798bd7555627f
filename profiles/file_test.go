package profiles

import (
	"strings"
	"testing"
	"time"
)

const validProfile = `
version: faas-gpu/v1
model: resnet50
gpu: Tesla V100-SXM2-16GB
memory: 1.5Gi
modelSize: 156Mi
loadTime: 1.2s
source: test
points:
- {batch: 1, sm: 10, quota: 100, latency: 21}
- {batch: 1, sm: 20, quota: 100, latency: 19.8}
- {batch: 4, sm: 10, quota: 100, latency: 33.5}
- {batch: 1, sm: 10, quota: 50, latency: 32.8}
`

func TestParse(t *testing.T) {
	// replace swaps one line of validProfile, so each case breaks one field.
	replace := func(old, new string) string {
		if !strings.Contains(validProfile, old) {
			t.Fatalf("validProfile has no %q", old)
		}
		return strings.Replace(validProfile, old, new, 1)
	}
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{name: "valid", yaml: validProfile},
		{name: "optional fields absent", yaml: "version: faas-gpu/v1\nmodel: m\ngpu: g\npoints: [{batch: 1, sm: 5, quota: 100, latency: 1}]\n"},
		{name: "wrong version", yaml: replace("faas-gpu/v1", "faas-gpu/v0"), wantErr: `version: want "faas-gpu/v1"`},
		{name: "unknown field", yaml: replace("source: test", "sauce: test"), wantErr: "unknown field"},
		{name: "unknown point field", yaml: replace("latency: 21}", "latency: 21, lat: 3}"), wantErr: "unknown field"},
		{name: "repeated field", yaml: replace("source: test", "source: a\nsource: b"), wantErr: "decode"},
		{name: "empty model", yaml: replace("model: resnet50", "model: ''"), wantErr: "model: must not be empty"},
		{name: "model with slash", yaml: replace("model: resnet50", "model: a/b"), wantErr: "model: \"a/b\""},
		{name: "no gpu", yaml: replace("gpu: Tesla V100-SXM2-16GB", ""), wantErr: "gpu: must name"},
		{name: "bad memory", yaml: replace("memory: 1.5Gi", "memory: lots"), wantErr: `memory: "lots"`},
		{name: "zero memory", yaml: replace("memory: 1.5Gi", "memory: '0'"), wantErr: "memory:"},
		{name: "model larger than memory", yaml: replace("modelSize: 156Mi", "modelSize: 2Gi"), wantErr: "modelSize: larger than memory"},
		{name: "bad load time", yaml: replace("loadTime: 1.2s", "loadTime: soon"), wantErr: `loadTime: "soon"`},
		{name: "negative load time", yaml: replace("loadTime: 1.2s", "loadTime: -1s"), wantErr: "loadTime:"},
		{name: "no points", yaml: "version: faas-gpu/v1\nmodel: m\ngpu: g\npoints: []\n", wantErr: "points: at least one"},
		{name: "sm zero", yaml: replace("sm: 20,", "sm: 0,"), wantErr: "points[1].sm: 0 is outside 1-100"},
		{name: "sm above 100", yaml: replace("sm: 20,", "sm: 101,"), wantErr: "points[1].sm: 101 is outside 1-100"},
		{name: "fractional sm", yaml: replace("sm: 20,", "sm: 20.5,"), wantErr: "decode"},
		{name: "quota zero", yaml: replace("quota: 50", "quota: 0"), wantErr: "points[3].quota: 0 is outside 1-100"},
		{name: "batch zero", yaml: replace("batch: 4", "batch: 0"), wantErr: "points[2].batch: 0 must be at least 1"},
		{name: "latency zero", yaml: replace("latency: 33.5", "latency: 0"), wantErr: "points[2].latency: 0 must be a positive"},
		{name: "latency negative", yaml: replace("latency: 33.5", "latency: -3"), wantErr: "points[2].latency"},
		{name: "latency missing", yaml: replace(", latency: 33.5", ""), wantErr: "points[2].latency"},
		{name: "repeated point", yaml: replace("{batch: 4, sm: 10", "{batch: 1, sm: 20"), wantErr: "points[2]: batch 1 sm 20 quota 100 already measured in points[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.curves == nil {
				t.Error("Parse did not index the curves")
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	p, err := Parse([]byte(validProfile))
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "resnet50" || p.GPU != "Tesla V100-SXM2-16GB" || p.Source != "test" {
		t.Errorf("identity = %q %q %q", p.Model, p.GPU, p.Source)
	}
	if p.MemoryBytes != 3<<29 || p.ModelSizeBytes != 156<<20 || p.LoadTime != 1200*time.Millisecond {
		t.Errorf("memory %d, modelSize %d, loadTime %s", p.MemoryBytes, p.ModelSizeBytes, p.LoadTime)
	}
	if len(p.Points) != 4 || p.Points[2] != (Point{Batch: 4, SM: 10, Quota: 100, Latency: 33.5}) {
		t.Errorf("points = %v", p.Points)
	}
	if got := p.Points[2].Throughput(); got < 119.4 || got > 119.41 {
		t.Errorf("throughput of 4 requests in 33.5 ms = %v, want 119.40", got)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	in := Profile{
		Model:          "my.model-v2",
		GPU:            "NVIDIA A100: 80GB #1", // ':' and '#' need quoting
		MemoryBytes:    1600 << 20,
		ModelSizeBytes: 156 << 20,
		LoadTime:       1213 * time.Millisecond,
		Source:         "line one\nline two, with \"quotes\"",
		Points: []Point{
			{Batch: 2, SM: 10, Quota: 100, Latency: 1.25},
			{Batch: 1, SM: 50, Quota: 30, Latency: 53.125},
			{Batch: 1, SM: 10, Quota: 100, Latency: 0.1 + 0.2}, // shortest exact float form
		},
	}
	data, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(Marshal()) = %v\n%s", err, data)
	}
	if out.Model != in.Model || out.GPU != in.GPU || out.Source != in.Source ||
		out.MemoryBytes != in.MemoryBytes || out.ModelSizeBytes != in.ModelSizeBytes || out.LoadTime != in.LoadTime {
		t.Errorf("header changed:\n in  %+v\n out %+v", in, out)
	}
	want := []Point{in.Points[2], in.Points[0], in.Points[1]} // quota 100 first, then batch, then SM
	if len(out.Points) != len(want) {
		t.Fatalf("points = %v", out.Points)
	}
	for i := range want {
		if out.Points[i] != want[i] {
			t.Errorf("points[%d] = %v, want %v", i, out.Points[i], want[i])
		}
	}
	if in.Points[0].Batch != 2 {
		t.Error("Marshal reordered the caller's points")
	}
	again, err := Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(data) {
		t.Errorf("Marshal is not stable:\n%s\n---\n%s", data, again)
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	_, err := Marshal(Profile{Model: "m", GPU: "g", Points: []Point{{Batch: 1, SM: 0, Quota: 100, Latency: 1}}})
	if err == nil || !strings.Contains(err.Error(), "points[0].sm") {
		t.Fatalf("err = %v, want a points[0].sm error", err)
	}
}

func TestYAMLScalar(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Tesla V100-SXM2-16GB", "Tesla V100-SXM2-16GB"},
		{"measured on node a (PyTorch 2.1)", "measured on node a (PyTorch 2.1)"},
		{"key: value", `"key: value"`},
		{"#comment", `"#comment"`},
		{"true", `"true"`},
		{"1.5", `"1.5"`},
		{"null", `"null"`},
		{"it's", `"it's"`},
		{"two\nlines", `"two\nlines"`},
	}
	for _, tt := range tests {
		if got := yamlScalar(tt.in); got != tt.want {
			t.Errorf("yamlScalar(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
