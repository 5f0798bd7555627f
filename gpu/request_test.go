package gpu

import (
	"errors"
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
	}
	for _, tt := range tests {
		if got := tt.req.SliceOn(dev); got != tt.want {
			t.Errorf("%+v.SliceOn = %+v, want %+v", tt.req, got, tt.want)
		}
	}
}
