package gpu

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name      string
		ann       map[string]string
		gpus      string
		want      Request
		wantField string
	}{
		{name: "defaults", want: Request{Model: "fn"}},
		{name: "full", ann: map[string]string{
			AnnotationSM: "30", AnnotationMemory: "4Gi", AnnotationModel: "resnet50",
			AnnotationModelSize: "200Mi", AnnotationSLO: "100ms", AnnotationProfile: "resnet50-v100",
		}, want: Request{SMPercent: 30, MemoryBytes: 4 << 30, Model: "resnet50", ModelSizeBytes: 200 << 20, SLO: 100 * time.Millisecond, Profile: "resnet50-v100"}},
		{name: "whole gpus", gpus: "2", want: Request{Model: "fn", WholeGPUs: 2}},
		{name: "whole gpus with sm 100", gpus: "1", ann: map[string]string{AnnotationSM: "100"}, want: Request{Model: "fn", SMPercent: 100, WholeGPUs: 1}},
		{name: "sm 0", ann: map[string]string{AnnotationSM: "0"}, wantField: AnnotationSM},
		{name: "sm 101", ann: map[string]string{AnnotationSM: "101"}, wantField: AnnotationSM},
		{name: "sm abc", ann: map[string]string{AnnotationSM: "abc"}, wantField: AnnotationSM},
		{name: "sm fraction", ann: map[string]string{AnnotationSM: "12.5"}, wantField: AnnotationSM},
		{name: "memory garbage", ann: map[string]string{AnnotationMemory: "four gigs"}, wantField: AnnotationMemory},
		{name: "memory negative", ann: map[string]string{AnnotationMemory: "-1Gi"}, wantField: AnnotationMemory},
		{name: "memory zero", ann: map[string]string{AnnotationMemory: "0"}, wantField: AnnotationMemory},
		{name: "model with slash", ann: map[string]string{AnnotationModel: "a/b"}, wantField: AnnotationModel},
		{name: "model empty", ann: map[string]string{AnnotationModel: ""}, wantField: AnnotationModel},
		{name: "model size above memory", ann: map[string]string{AnnotationMemory: "1Gi", AnnotationModelSize: "2Gi"}, wantField: AnnotationModelSize},
		{name: "slo not a duration", ann: map[string]string{AnnotationSLO: "fast"}, wantField: AnnotationSLO},
		{name: "slo negative", ann: map[string]string{AnnotationSLO: "-5ms"}, wantField: AnnotationSLO},
		{name: "profile bad", ann: map[string]string{AnnotationProfile: "../etc"}, wantField: AnnotationProfile},
		{name: "gpus zero", gpus: "0", wantField: LimitNvidiaGPU},
		{name: "gpus fraction", gpus: "0.5", wantField: LimitNvidiaGPU},
		{name: "gpus with sm", gpus: "1", ann: map[string]string{AnnotationSM: "50"}, wantField: LimitNvidiaGPU},
		{name: "gpus with memory", gpus: "1", ann: map[string]string{AnnotationMemory: "1Gi"}, wantField: LimitNvidiaGPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest("fn", tt.ann, tt.gpus)
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Fatalf("err = %v, want a FieldError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSliceOn(t *testing.T) {
	dev := Device{MemoryBytes: 16 << 30}
	tests := []struct {
		req  Request
		want Slice
	}{
		{Request{}, Slice{SMPercent: 100, MemoryBytes: 16 << 30}},
		{Request{SMPercent: 30, MemoryBytes: 4 << 30}, Slice{SMPercent: 30, MemoryBytes: 4 << 30}},
		{Request{SMPercent: 30}, Slice{SMPercent: 30, MemoryBytes: 16 << 30}},
		{Request{WholeGPUs: 2}, Slice{SMPercent: 100, MemoryBytes: 16 << 30}},
		{Request{SMPercent: 25, MemoryPercent: 25}, Slice{SMPercent: 25, MemoryBytes: 4 << 30}},
		// A plan fills MemoryBytes from a profile; the share asked for wins.
		{Request{MemoryPercent: 50, MemoryBytes: 1 << 30}, Slice{SMPercent: 100, MemoryBytes: 8 << 30}},
	}
	for _, tt := range tests {
		if got := tt.req.SliceOn(dev); got != tt.want {
			t.Errorf("%+v.SliceOn = %+v, want %+v", tt.req, got, tt.want)
		}
	}
}

func TestParseRequestAliases(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		gpus string
		want Request
		// wantField is the field refused; wantAlso a key the message must
		// name too (the other side of a conflict).
		wantField, wantAlso string
	}{
		{name: "hami cores and MiB", ann: map[string]string{AliasHAMiCores: "30", AliasHAMiMemory: "3000"},
			want: Request{Model: "fn", SMPercent: 30, MemoryBytes: 3000 << 20}},
		{name: "hami with nvidia.com/gpu 1 is one slice", gpus: "1", ann: map[string]string{AliasHAMiMemory: "1024"},
			want: Request{Model: "fn", MemoryBytes: 1 << 30}},
		{name: "hami with two shared gpus", gpus: "2", ann: map[string]string{AliasHAMiCores: "50"}, wantField: LimitNvidiaGPU, wantAlso: AliasHAMiCores},
		{name: "hami memory percentage", ann: map[string]string{AliasHAMiMemoryPercent: "25"},
			want: Request{Model: "fn", MemoryPercent: 25}},
		{name: "hami memory in MiB and as a percentage", ann: map[string]string{AliasHAMiMemory: "1024", AliasHAMiMemoryPercent: "25"},
			wantField: AliasHAMiMemory, wantAlso: AliasHAMiMemoryPercent},
		{name: "hami cores above 100", ann: map[string]string{AliasHAMiCores: "150"}, wantField: AliasHAMiCores},
		{name: "hami MiB not a number", ann: map[string]string{AliasHAMiMemory: "3Gi"}, wantField: AliasHAMiMemory},
		{name: "kai fraction is SM and memory share", ann: map[string]string{AliasKAIFraction: "0.25"},
			want: Request{Model: "fn", SMPercent: 25, MemoryPercent: 25}},
		{name: "kai tiny fraction rounds up to 1%", ann: map[string]string{AliasKAIFraction: "0.001"},
			want: Request{Model: "fn", SMPercent: 1, MemoryPercent: 1}},
		{name: "kai memory in MiB", ann: map[string]string{AliasKAIMemory: "2000"},
			want: Request{Model: "fn", MemoryBytes: 2000 << 20}},
		{name: "kai fraction above 1", ann: map[string]string{AliasKAIFraction: "1.5"}, wantField: AliasKAIFraction},
		{name: "kai fraction and memory", ann: map[string]string{AliasKAIFraction: "0.5", AliasKAIMemory: "2000"},
			wantField: AliasKAIMemory, wantAlso: AliasKAIFraction},
		{name: "fastgshare sm and bytes", ann: map[string]string{AliasFaSTSM: "50", AliasFaSTMemory: "2700000000"},
			want: Request{Model: "fn", SMPercent: 50, MemoryBytes: 2700000000}},
		{name: "fastgshare quotas are read and do nothing", ann: map[string]string{AliasFaSTSM: "20", AliasFaSTQuotaRequest: "0.7", AliasFaSTQuotaLimit: "0.8"},
			want: Request{Model: "fn", SMPercent: 20}},
		{name: "fastgshare quota above 1", ann: map[string]string{AliasFaSTQuotaLimit: "1.2"}, wantField: AliasFaSTQuotaLimit},
		{name: "fastgshare quota request above limit", ann: map[string]string{AliasFaSTQuotaRequest: "0.9", AliasFaSTQuotaLimit: "0.5"},
			wantField: AliasFaSTQuotaRequest, wantAlso: AliasFaSTQuotaLimit},
		{name: "alias agreeing with faas-gpu", ann: map[string]string{AnnotationSM: "30", AliasHAMiCores: "30", AnnotationMemory: "1Gi", AliasFaSTMemory: "1073741824"},
			want: Request{Model: "fn", SMPercent: 30, MemoryBytes: 1 << 30}},
		{name: "sm conflicts with hami cores", ann: map[string]string{AnnotationSM: "30", AliasHAMiCores: "40"}, wantField: AnnotationSM, wantAlso: AliasHAMiCores},
		{name: "sm conflicts with fastgshare", ann: map[string]string{AnnotationSM: "30", AliasFaSTSM: "40"}, wantField: AnnotationSM, wantAlso: AliasFaSTSM},
		{name: "sm conflicts with kai fraction", ann: map[string]string{AnnotationSM: "30", AliasKAIFraction: "0.5"}, wantField: AnnotationSM, wantAlso: AliasKAIFraction},
		{name: "memory conflicts with hami MiB", ann: map[string]string{AnnotationMemory: "4Gi", AliasHAMiMemory: "3000"}, wantField: AnnotationMemory, wantAlso: AliasHAMiMemory},
		{name: "memory conflicts with kai memory", ann: map[string]string{AnnotationMemory: "4Gi", AliasKAIMemory: "3000"}, wantField: AnnotationMemory, wantAlso: AliasKAIMemory},
		{name: "memory conflicts with fastgshare", ann: map[string]string{AnnotationMemory: "4Gi", AliasFaSTMemory: "100"}, wantField: AnnotationMemory, wantAlso: AliasFaSTMemory},
		{name: "memory with hami percentage", ann: map[string]string{AnnotationMemory: "4Gi", AliasHAMiMemoryPercent: "50"}, wantField: AnnotationMemory, wantAlso: AliasHAMiMemoryPercent},
		{name: "two aliases disagree", ann: map[string]string{AliasHAMiCores: "30", AliasFaSTSM: "40"}, wantField: AliasHAMiCores, wantAlso: AliasFaSTSM},
		{name: "model size above alias memory", ann: map[string]string{AliasKAIMemory: "100", AnnotationModelSize: "1Gi"}, wantField: AnnotationModelSize, wantAlso: AliasKAIMemory},
		{name: "whole gpus with fastgshare sm", gpus: "1", ann: map[string]string{AliasFaSTSM: "50"}, wantField: LimitNvidiaGPU, wantAlso: AliasFaSTSM},
		{name: "whole gpus with kai fraction", gpus: "1", ann: map[string]string{AliasKAIFraction: "1"}, wantField: LimitNvidiaGPU, wantAlso: AliasKAIFraction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest("fn", tt.ann, tt.gpus)
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Fatalf("err = %v, want a FieldError on %s", err, tt.wantField)
				}
				if !strings.Contains(fe.Reason, tt.wantAlso) {
					t.Fatalf("err = %v, want it to name %s too", err, tt.wantAlso)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
