package kvsize_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/adprouter/adprouter/kvsize"
)

func gqa(layers, kvHeads, headDim, tp int, dt kvsize.DType) kvsize.KVShape {
	return kvsize.KVShape{Attention: kvsize.AttentionGQA, Layers: layers, KVHeads: kvHeads, HeadDim: headDim, AttentionTP: tp, DType: dt}
}

func mla(layers, rank, rope int, dt kvsize.DType) kvsize.KVShape {
	return kvsize.KVShape{Attention: kvsize.AttentionMLA, Layers: layers, KVLoraRank: rank, QKRopeHeadDim: rope, DType: dt}
}

func TestBytesPerToken(t *testing.T) {
	tests := []struct {
		name  string
		shape kvsize.KVShape
		want  uint64
	}{
		// Published shapes (config.json of each model).
		{"Llama-3.1-8B bf16", gqa(32, 8, 128, 0, kvsize.DTypeBF16), 131072},
		{"Llama-3.1-8B fp16", gqa(32, 8, 128, 1, kvsize.DTypeFP16), 131072},
		{"Llama-3.1-8B fp8", gqa(32, 8, 128, 1, kvsize.DTypeFP8), 65536},
		{"Llama-3.1-8B nvfp4", gqa(32, 8, 128, 1, kvsize.DTypeNVFP4), 36864}, // 65536 * 9/16
		{"Llama-3.1-70B bf16", gqa(80, 8, 128, 1, kvsize.DTypeBF16), 327680},
		{"Llama-3.1-70B bf16 TP8", gqa(80, 8, 128, 8, kvsize.DTypeBF16), 40960},
		{"Llama-3.1-70B bf16 TP16 replicates heads", gqa(80, 8, 128, 16, kvsize.DTypeBF16), 40960},
		{"DeepSeek-V3 bf16", mla(61, 512, 64, kvsize.DTypeBF16), 70272},
		{"DeepSeek-V3 fp8", mla(61, 512, 64, kvsize.DTypeFP8), 35136},
		{"DeepSeek-V3 bf16, TP does not split MLA", func() kvsize.KVShape { s := mla(61, 512, 64, kvsize.DTypeBF16); s.AttentionTP = 8; return s }(), 70272},
		{"MLA without rope part", mla(2, 512, 0, kvsize.DTypeBF16), 2048},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.shape.BytesPerToken()
			wantValue(t, fmt.Sprintf("BytesPerToken(%+v)", tt.shape), got, err, tt.want)
		})
	}
}

func TestBytesPerTokenInvalid(t *testing.T) {
	tests := []struct {
		name  string
		shape kvsize.KVShape
		want  string // substring of the error
	}{
		{"zero shape", kvsize.KVShape{}, "DType"},
		{"no attention", kvsize.KVShape{Layers: 1, DType: kvsize.DTypeBF16}, "Attention"},
		{"no layers", gqa(0, 8, 128, 1, kvsize.DTypeBF16), "Layers is 0"},
		{"negative layers", gqa(-1, 8, 128, 1, kvsize.DTypeBF16), "Layers is -1"},
		{"no kv heads", gqa(32, 0, 128, 1, kvsize.DTypeBF16), "KVHeads is 0"},
		{"no head dim", gqa(32, 8, 0, 1, kvsize.DTypeBF16), "HeadDim is 0"},
		{"negative TP", gqa(32, 8, 128, -2, kvsize.DTypeBF16), "AttentionTP is -2"},
		{"heads do not split", gqa(32, 8, 128, 3, kvsize.DTypeBF16), "does not divide evenly"},
		{"heads do not replicate", gqa(32, 4, 128, 6, kvsize.DTypeBF16), "cannot be replicated"},
		{"unknown dtype", gqa(32, 8, 128, 1, kvsize.DType(99)), "DType 99"},
		{"nvfp4 head dim not multiple of 16", gqa(32, 8, 72, 1, kvsize.DTypeNVFP4), "multiple of 16"},
		{"nvfp4 MLA", mla(61, 512, 64, kvsize.DTypeNVFP4), "not supported with MLA"},
		{"MLA field on GQA", func() kvsize.KVShape { s := gqa(32, 8, 128, 1, kvsize.DTypeBF16); s.KVLoraRank = 512; return s }(), "MLA fields"},
		{"GQA field on MLA", func() kvsize.KVShape { s := mla(61, 512, 64, kvsize.DTypeBF16); s.KVHeads = 8; return s }(), "GQA fields"},
		{"MLA without rank", mla(61, 0, 64, kvsize.DTypeBF16), "KVLoraRank is 0"},
		{"MLA negative rope", mla(61, 512, -1, kvsize.DTypeBF16), "QKRopeHeadDim is -1"},
		{"overflow", gqa(1<<62, 1<<20, 1<<20, 1, kvsize.DTypeBF16), "overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.shape.BytesPerToken()
			wantInvalid(t, fmt.Sprintf("BytesPerToken(%+v)", tt.shape), got, err, tt.want)
		})
	}
}

func TestParseDType(t *testing.T) {
	tests := []struct {
		in   string
		want kvsize.DType
	}{
		{"bf16", kvsize.DTypeBF16}, {"BFloat16", kvsize.DTypeBF16},
		{"fp16", kvsize.DTypeFP16}, {"float16", kvsize.DTypeFP16}, {"half", kvsize.DTypeFP16},
		{"fp8", kvsize.DTypeFP8}, {"FP8_E4M3", kvsize.DTypeFP8}, {"float8_e5m2", kvsize.DTypeFP8},
		{" nvfp4 ", kvsize.DTypeNVFP4},
	}
	for _, tt := range tests {
		got, err := kvsize.ParseDType(tt.in)
		assert.NoError(t, err, "ParseDType(%q)", tt.in)
		assert.Equal(t, tt.want, got, "ParseDType(%q)", tt.in)
		back, err := kvsize.ParseDType(got.String())
		assert.NoError(t, err, "ParseDType(%v.String())", got)
		assert.Equal(t, got, back, "ParseDType(%v.String())", got)
	}
	for _, bad := range []string{"", "int8", "fp4", "auto"} {
		got, err := kvsize.ParseDType(bad)
		assert.ErrorIs(t, err, kvsize.ErrInvalid, "ParseDType(%q) = %v", bad, got)
	}
}

func ExampleKVShape_BytesPerToken() {
	llama8B := kvsize.KVShape{
		Attention: kvsize.AttentionGQA,
		Layers:    32,
		KVHeads:   8,
		HeadDim:   128,
		DType:     kvsize.DTypeBF16,
	}
	deepSeekV3 := kvsize.KVShape{
		Attention:     kvsize.AttentionMLA,
		Layers:        61,
		KVLoraRank:    512,
		QKRopeHeadDim: 64,
		DType:         kvsize.DTypeBF16,
	}
	for _, s := range []kvsize.KVShape{llama8B, deepSeekV3} {
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
