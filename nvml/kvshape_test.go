package nvml_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/nvml"
)

func gqa(layers, kvHeads, headDim, tp int, dt nvml.DType) nvml.KVShape {
	return nvml.KVShape{Attention: nvml.AttentionGQA, Layers: layers, KVHeads: kvHeads, HeadDim: headDim, AttentionTP: tp, DType: dt}
}

func mla(layers, rank, rope int, dt nvml.DType) nvml.KVShape {
	return nvml.KVShape{Attention: nvml.AttentionMLA, Layers: layers, KVLoraRank: rank, QKRopeHeadDim: rope, DType: dt}
}

func TestBytesPerToken(t *testing.T) {
	tests := []struct {
		name  string
		shape nvml.KVShape
		want  uint64
	}{
		// Published shapes (config.json of each model).
		{"Llama-3.1-8B bf16", gqa(32, 8, 128, 0, nvml.DTypeBF16), 131072},
		{"Llama-3.1-8B fp16", gqa(32, 8, 128, 1, nvml.DTypeFP16), 131072},
		{"Llama-3.1-8B fp8", gqa(32, 8, 128, 1, nvml.DTypeFP8), 65536},
		{"Llama-3.1-8B nvfp4", gqa(32, 8, 128, 1, nvml.DTypeNVFP4), 36864}, // 65536 * 9/16
		{"Llama-3.1-70B bf16", gqa(80, 8, 128, 1, nvml.DTypeBF16), 327680},
		{"Llama-3.1-70B bf16 TP8", gqa(80, 8, 128, 8, nvml.DTypeBF16), 40960},
		{"Llama-3.1-70B bf16 TP16 replicates heads", gqa(80, 8, 128, 16, nvml.DTypeBF16), 40960},
		{"DeepSeek-V3 bf16", mla(61, 512, 64, nvml.DTypeBF16), 70272},
		{"DeepSeek-V3 fp8", mla(61, 512, 64, nvml.DTypeFP8), 35136},
		{"DeepSeek-V3 bf16, TP does not split MLA", func() nvml.KVShape { s := mla(61, 512, 64, nvml.DTypeBF16); s.AttentionTP = 8; return s }(), 70272},
		{"MLA without rope part", mla(2, 512, 0, nvml.DTypeBF16), 2048},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.shape.BytesPerToken()
			if err != nil {
				t.Fatalf("BytesPerToken(%+v): %v", tt.shape, err)
			}
			if got != tt.want {
				t.Errorf("BytesPerToken(%+v) = %d, want %d", tt.shape, got, tt.want)
			}
		})
	}
}

func TestBytesPerTokenInvalid(t *testing.T) {
	tests := []struct {
		name  string
		shape nvml.KVShape
		want  string // substring of the error
	}{
		{"zero shape", nvml.KVShape{}, "DType"},
		{"no attention", nvml.KVShape{Layers: 1, DType: nvml.DTypeBF16}, "Attention"},
		{"no layers", gqa(0, 8, 128, 1, nvml.DTypeBF16), "Layers is 0"},
		{"negative layers", gqa(-1, 8, 128, 1, nvml.DTypeBF16), "Layers is -1"},
		{"no kv heads", gqa(32, 0, 128, 1, nvml.DTypeBF16), "KVHeads is 0"},
		{"no head dim", gqa(32, 8, 0, 1, nvml.DTypeBF16), "HeadDim is 0"},
		{"negative TP", gqa(32, 8, 128, -2, nvml.DTypeBF16), "AttentionTP is -2"},
		{"heads do not split", gqa(32, 8, 128, 3, nvml.DTypeBF16), "does not divide evenly"},
		{"heads do not replicate", gqa(32, 4, 128, 6, nvml.DTypeBF16), "cannot be replicated"},
		{"unknown dtype", gqa(32, 8, 128, 1, nvml.DType(99)), "DType 99"},
		{"nvfp4 head dim not multiple of 16", gqa(32, 8, 72, 1, nvml.DTypeNVFP4), "multiple of 16"},
		{"nvfp4 MLA", mla(61, 512, 64, nvml.DTypeNVFP4), "not supported with MLA"},
		{"MLA field on GQA", func() nvml.KVShape { s := gqa(32, 8, 128, 1, nvml.DTypeBF16); s.KVLoraRank = 512; return s }(), "MLA fields"},
		{"GQA field on MLA", func() nvml.KVShape { s := mla(61, 512, 64, nvml.DTypeBF16); s.KVHeads = 8; return s }(), "GQA fields"},
		{"MLA without rank", mla(61, 0, 64, nvml.DTypeBF16), "KVLoraRank is 0"},
		{"MLA negative rope", mla(61, 512, -1, nvml.DTypeBF16), "QKRopeHeadDim is -1"},
		{"overflow", gqa(1<<62, 1<<20, 1<<20, 1, nvml.DTypeBF16), "overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.shape.BytesPerToken()
			if err == nil {
				t.Fatalf("BytesPerToken(%+v) = %d, want an error", tt.shape, got)
			}
			if !errors.Is(err, nvml.ErrInvalidArgument) {
				t.Errorf("error %q does not wrap ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestParseDType(t *testing.T) {
	tests := []struct {
		in   string
		want nvml.DType
	}{
		{"bf16", nvml.DTypeBF16}, {"BFloat16", nvml.DTypeBF16},
		{"fp16", nvml.DTypeFP16}, {"float16", nvml.DTypeFP16}, {"half", nvml.DTypeFP16},
		{"fp8", nvml.DTypeFP8}, {"FP8_E4M3", nvml.DTypeFP8}, {"float8_e5m2", nvml.DTypeFP8},
		{" nvfp4 ", nvml.DTypeNVFP4},
	}
	for _, tt := range tests {
		got, err := nvml.ParseDType(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if back, err := nvml.ParseDType(got.String()); err != nil || back != got {
			t.Errorf("ParseDType(%v.String()) = %v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", "int8", "fp4", "auto"} {
		if got, err := nvml.ParseDType(bad); !errors.Is(err, nvml.ErrInvalidArgument) {
			t.Errorf("ParseDType(%q) = %v, %v; want ErrInvalidArgument", bad, got, err)
		}
	}
}

func ExampleKVShape_BytesPerToken() {
	llama8B := nvml.KVShape{
		Attention: nvml.AttentionGQA,
		Layers:    32,
		KVHeads:   8,
		HeadDim:   128,
		DType:     nvml.DTypeBF16,
	}
	deepSeekV3 := nvml.KVShape{
		Attention:     nvml.AttentionMLA,
		Layers:        61,
		KVLoraRank:    512,
		QKRopeHeadDim: 64,
		DType:         nvml.DTypeBF16,
	}
	for _, s := range []nvml.KVShape{llama8B, deepSeekV3} {
		n, err := s.BytesPerToken()
		if err != nil {
			panic(err)
		}
		fmt.Println(s.Attention, n, "bytes/token")
	}
	// Output:
	// gqa 131072 bytes/token
	// mla 70272 bytes/token
}
