package kvsize

import (
	"fmt"
	"math/bits"
	"strings"
)

// DType is the element type of the KV cache.
type DType int

// The KV cache element types. The zero DType is not a type, so that a
// forgotten field is an error.
const (
	DTypeBF16  DType = 1 // bfloat16: 2 bytes per element
	DTypeFP16  DType = 2 // float16: 2 bytes per element
	DTypeFP8   DType = 3 // fp8 (e4m3 or e5m2): 1 byte per element
	DTypeNVFP4 DType = 4 // NVFP4: 4-bit elements plus one fp8 scale per 16, 9/16 byte per element
)

// nvfp4Block is the number of NVFP4 elements that share one fp8 scale.
const nvfp4Block = 16

// size returns the bytes per element of d as num/den.
func (d DType) size() (num, den uint64, ok bool) {
	switch d {
	case DTypeBF16, DTypeFP16:
		return 2, 1, true
	case DTypeFP8:
		return 1, 1, true
	case DTypeNVFP4:
		// 16 elements: 16 x 4 bits = 8 bytes of values + 1 byte e4m3 scale.
		return 9, nvfp4Block, true
	}
	return 0, 0, false
}

// String returns the canonical name: "bf16", "fp16", "fp8" or "nvfp4".
func (d DType) String() string {
	switch d {
	case DTypeBF16:
		return "bf16"
	case DTypeFP16:
		return "fp16"
	case DTypeFP8:
		return "fp8"
	case DTypeNVFP4:
		return "nvfp4"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// ParseDType parses a KV cache dtype name, case-insensitively: "bf16" or
// "bfloat16"; "fp16", "float16" or "half"; "fp8", "fp8_e4m3", "fp8_e5m2",
// "float8_e4m3fn" or "float8_e5m2"; "nvfp4".
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bf16", "bfloat16":
		return DTypeBF16, nil
	case "fp16", "float16", "half":
		return DTypeFP16, nil
	case "fp8", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fn", "float8_e5m2":
		return DTypeFP8, nil
	case "nvfp4":
		return DTypeNVFP4, nil
	}
	return 0, invalidf("KV dtype %q is not one of bf16, fp16, fp8, nvfp4", s)
}

// Attention is the attention architecture, which decides what a token's
// KV cache holds.
type Attention int

// The attention architectures. The zero Attention is not one.
const (
	// AttentionGQA is multi-head or grouped-query attention: each layer
	// caches a key and a value vector per KV head.
	AttentionGQA Attention = 1
	// AttentionMLA is multi-head latent attention (DeepSeek-V2/V3): each
	// layer caches one compressed latent plus the rotary key part.
	AttentionMLA Attention = 2
)

// String returns "gqa" or "mla".
func (a Attention) String() string {
	switch a {
	case AttentionGQA:
		return "gqa"
	case AttentionMLA:
		return "mla"
	}
	return fmt.Sprintf("Attention(%d)", int(a))
}

// KVShape is the part of a model's configuration that decides how many
// bytes of KV cache one token takes on one rank.
type KVShape struct {
	// Attention is the architecture: AttentionGQA or AttentionMLA.
	Attention Attention
	// Layers is the number of attention layers (num_hidden_layers).
	Layers int
	// KVHeads is the number of key/value heads (num_key_value_heads; equal
	// to num_attention_heads without GQA). GQA only.
	KVHeads int
	// HeadDim is the size of one head (head_dim, usually
	// hidden_size / num_attention_heads). GQA only.
	HeadDim int
	// AttentionTP is the tensor-parallel degree of attention; 0 means 1.
	// Under attention data parallelism it is 1. GQA only: KV heads are
	// split across it (a rank holds max(1, KVHeads/AttentionTP) of them);
	// the MLA latent is not split.
	AttentionTP int
	// KVLoraRank is the latent size (kv_lora_rank, 512 in DeepSeek-V3).
	// MLA only.
	KVLoraRank int
	// QKRopeHeadDim is the rotary key size (qk_rope_head_dim, 64 in
	// DeepSeek-V3). MLA only.
	QKRopeHeadDim int
	// DType is the KV cache element type.
	DType DType
}

// BytesPerToken returns the bytes of KV cache one token takes on one rank:
//
//	GQA: 2 * Layers * max(1, KVHeads/AttentionTP) * HeadDim * dtype bytes
//	MLA: Layers * (KVLoraRank + QKRopeHeadDim) * dtype bytes
//
// with 2 bytes per element for bf16/fp16 and 1 for fp8. NVFP4 (GQA only)
// stores 16 four-bit elements and one fp8 scale in 9 bytes, so HeadDim must
// be a multiple of 16; the per-layer fp32 global scale is not per token and
// is not counted. NVFP4 with MLA is rejected: how engines lay out an NVFP4
// latent is not standardised. Likewise fp8 MLA is counted as 1 byte per
// element, which does not describe layouts that keep the rotary part in
// 16 bits or add scales (FlashMLA's 656-byte fp8 layout); for those, give
// SizeKV the engine's own bytes per token.
//
// It returns an error wrapping ErrInvalid for a shape that is
// incomplete or inconsistent: a count that is not positive, a field of the
// other architecture that is set, KV heads that do not split evenly over
// AttentionTP (KVHeads % AttentionTP, or AttentionTP % KVHeads when heads
// are replicated), or a product that overflows uint64.
func (s KVShape) BytesPerToken() (uint64, error) {
	num, den, ok := s.DType.size()
	if !ok {
		return 0, invalidf("KVShape.DType %d is not one of DTypeBF16 (1), DTypeFP16 (2), DTypeFP8 (3), DTypeNVFP4 (4)", int(s.DType))
	}
	if s.Layers <= 0 {
		return 0, invalidf("KVShape.Layers is %d; want the model's number of attention layers, > 0", s.Layers)
	}
	switch s.Attention {
	case AttentionGQA:
		return s.gqaBytes(num, den)
	case AttentionMLA:
		return s.mlaBytes(num, den)
	}
	return 0, invalidf("KVShape.Attention %d is not AttentionGQA (1) or AttentionMLA (2)", int(s.Attention))
}

func (s KVShape) gqaBytes(num, den uint64) (uint64, error) {
	if s.KVLoraRank != 0 || s.QKRopeHeadDim != 0 {
		return 0, invalidf("KVShape has KVLoraRank %d / QKRopeHeadDim %d set for GQA attention; those are MLA fields, want 0", s.KVLoraRank, s.QKRopeHeadDim)
	}
	if s.KVHeads <= 0 {
		return 0, invalidf("KVShape.KVHeads is %d; want the number of key/value heads, > 0", s.KVHeads)
	}
	if s.HeadDim <= 0 {
		return 0, invalidf("KVShape.HeadDim is %d; want the size of one head, > 0", s.HeadDim)
	}
	tp := s.AttentionTP
	if tp == 0 {
		tp = 1
	}
	if tp < 0 {
		return 0, invalidf("KVShape.AttentionTP is %d; want 1 or more (0 means 1)", s.AttentionTP)
	}
	headsPerRank := 1
	switch {
	case s.KVHeads >= tp:
		if s.KVHeads%tp != 0 {
			return 0, invalidf("KVShape.KVHeads %d does not divide evenly over AttentionTP %d", s.KVHeads, tp)
		}
		headsPerRank = s.KVHeads / tp
	case tp%s.KVHeads != 0:
		return 0, invalidf("AttentionTP %d is not a multiple of KVShape.KVHeads %d, so KV heads cannot be replicated evenly", tp, s.KVHeads)
	}
	if den > 1 && uint64(s.HeadDim)%den != 0 {
		return 0, invalidf("KVShape.HeadDim %d is not a multiple of %d, the %s scale block", s.HeadDim, den, s.DType)
	}
	return product(s, 2, uint64(s.Layers), uint64(headsPerRank), uint64(s.HeadDim)/den, num)
}

func (s KVShape) mlaBytes(num, den uint64) (uint64, error) {
	if s.KVHeads != 0 || s.HeadDim != 0 {
		return 0, invalidf("KVShape has KVHeads %d / HeadDim %d set for MLA attention; those are GQA fields, want 0", s.KVHeads, s.HeadDim)
	}
	if s.KVLoraRank <= 0 {
		return 0, invalidf("KVShape.KVLoraRank is %d; want the latent size (kv_lora_rank), > 0", s.KVLoraRank)
	}
	if s.QKRopeHeadDim < 0 {
		return 0, invalidf("KVShape.QKRopeHeadDim is %d; want the rotary key size (qk_rope_head_dim), >= 0", s.QKRopeHeadDim)
	}
	if s.AttentionTP < 0 {
		return 0, invalidf("KVShape.AttentionTP is %d; want 1 or more (0 means 1)", s.AttentionTP)
	}
	if den > 1 {
		return 0, invalidf("KVShape.DType %s is not supported with MLA: its latent layout is engine specific; pass the engine's bytes per token to SizeKV instead", s.DType)
	}
	perLayer := uint64(s.KVLoraRank) + uint64(s.QKRopeHeadDim)
	return product(s, uint64(s.Layers), perLayer, num)
}

// product multiplies fs, failing on overflow.
func product(s KVShape, fs ...uint64) (uint64, error) {
	p := uint64(1)
	for _, f := range fs {
		hi, lo := bits.Mul64(p, f)
		if hi != 0 {
			return 0, invalidf("KV bytes per token of %+v overflow 64 bits", s)
		}
		p = lo
	}
	return p, nil
}
