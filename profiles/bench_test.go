package profiles

import (
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
)

func benchProfile(b *testing.B) *Profile {
	p, _, ok := builtinStore(b).Lookup("resnet50", gpu.V100Product)
	if !ok {
		b.Fatal("no resnet50")
	}
	return p
}

func BenchmarkLatency(b *testing.B) {
	p := benchProfile(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := p.SliceLatency(4, 37.5); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkThroughput(b *testing.B) {
	p := benchProfile(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := p.Throughput(8, 15); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuiltin(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Builtin(); err != nil {
			b.Fatal(err)
		}
	}
}
