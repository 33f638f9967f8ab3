package kvsize

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Defaults of [SizeInput].
const (
	// DefaultFraction is the share of free memory (after the reserve) given
	// to the KV cache, as TensorRT-LLM's free_gpu_memory_fraction.
	DefaultFraction = 0.9
	// DefaultTokensPerBlock is the KV block size in tokens.
	DefaultTokensPerBlock = 32
)

// SizeInput is what [SizeKV] sizes a rank's KV cache from.
type SizeInput struct {
	// FreeBytes is the GPU's free memory, normally MemoryInfo.FreeBytes
	// read after the model weights are loaded and a profiling run is done.
	FreeBytes uint64
	// ReserveBytes is memory to leave alone (activations, other
	// processes) before the fraction is applied.
	ReserveBytes uint64
	// Fraction is the share of the rest given to the KV cache, in (0, 1];
	// 0 means DefaultFraction.
	Fraction float64
	// BytesPerToken is the KV bytes one token takes on this rank, from
	// KVShape.BytesPerToken or the engine; must be > 0.
	BytesPerToken uint64
	// TokensPerBlock is the KV block size; 0 means DefaultTokensPerBlock.
	TokensPerBlock uint64
	// MaxTokens caps the result (e.g. max_tokens in the engine's KV cache
	// configuration); 0 means no cap.
	MaxTokens uint64
}

// Budget is a rank's start-up KV cache size together with every input and
// intermediate figure that produced it, so a user can see why:
//
//	AvailableBytes = FreeBytes - ReserveBytes        (0 if the reserve exceeds free)
//	UsableBytes    = floor(Fraction * AvailableBytes)
//	FitTokens      = floor(UsableBytes / BytesPerToken)
//	Tokens         = min(FitTokens, MaxTokens if set), rounded down to whole blocks
//	Blocks         = Tokens / TokensPerBlock
type Budget struct {
	// Inputs, with defaults applied.
	FreeBytes      uint64  // free device memory
	ReserveBytes   uint64  // memory kept back before the fraction
	Fraction       float64 // share of the rest given to the KV cache
	BytesPerToken  uint64  // KV bytes of one token on this rank
	TokensPerBlock uint64  // KV block size
	MaxTokens      uint64  // cap; 0: no cap

	// Intermediates.
	AvailableBytes uint64 // FreeBytes - ReserveBytes, or 0
	UsableBytes    uint64 // floor(Fraction * AvailableBytes)
	FitTokens      uint64 // floor(UsableBytes / BytesPerToken), before cap and blocks

	// Results.
	Tokens uint64 // the KV cache size in tokens: Blocks * TokensPerBlock
	Blocks uint64 // the KV cache size in blocks
	// Capped is true when MaxTokens, not memory, limited Tokens.
	Capped bool
	// Reason explains a zero or capped budget; empty otherwise.
	Reason string
}

// SizeKV computes a rank's start-up KV budget (see [Budget] for the
// formula). Fraction is applied exactly to the float64 value given.
//
// A reserve larger than free memory, or usable memory smaller than one
// block, is not an error: the budget is 0 tokens and Reason says why. Errors,
// wrapping ErrInvalid, are for inputs that make no sense: a Fraction
// outside (0, 1] or not a number, BytesPerToken 0, or a block of
// TokensPerBlock tokens whose size overflows uint64.
func SizeKV(in SizeInput) (Budget, error) {
	b := Budget{
		FreeBytes:      in.FreeBytes,
		ReserveBytes:   in.ReserveBytes,
		Fraction:       in.Fraction,
		BytesPerToken:  in.BytesPerToken,
		TokensPerBlock: in.TokensPerBlock,
		MaxTokens:      in.MaxTokens,
	}
	if b.Fraction == 0 {
		b.Fraction = DefaultFraction
	}
	if b.TokensPerBlock == 0 {
		b.TokensPerBlock = DefaultTokensPerBlock
	}
	if math.IsNaN(b.Fraction) || b.Fraction <= 0 || b.Fraction > 1 {
		return Budget{}, invalidf("SizeInput.Fraction is %v; want a share of free memory in (0, 1], or 0 for the default %v", in.Fraction, DefaultFraction)
	}
	if b.BytesPerToken == 0 {
		return Budget{}, invalidf("SizeInput.BytesPerToken is 0; want the KV bytes of one token, > 0 (see KVShape.BytesPerToken)")
	}
	if hi, _ := mul64(b.BytesPerToken, b.TokensPerBlock); hi {
		return Budget{}, invalidf("a block of %d tokens at %d bytes per token overflows 64 bits", b.TokensPerBlock, b.BytesPerToken)
	}

	if b.ReserveBytes > b.FreeBytes {
		b.Reason = fmt.Sprintf("reserve %s exceeds free memory %s: no memory left for the KV cache", fmtBytes(b.ReserveBytes), fmtBytes(b.FreeBytes))
		return b, nil
	}
	b.AvailableBytes = b.FreeBytes - b.ReserveBytes
	b.UsableBytes = mulFloor(b.AvailableBytes, b.Fraction)
	b.FitTokens = b.UsableBytes / b.BytesPerToken

	tokens := b.FitTokens
	if b.MaxTokens > 0 && tokens > b.MaxTokens {
		tokens = b.MaxTokens
		b.Capped = true
	}
	b.Blocks = tokens / b.TokensPerBlock
	b.Tokens = b.Blocks * b.TokensPerBlock

	switch {
	case b.Tokens == 0 && b.Capped:
		b.Reason = fmt.Sprintf("cap of %d tokens is less than one block of %d tokens", b.MaxTokens, b.TokensPerBlock)
	case b.Tokens == 0:
		b.Reason = fmt.Sprintf("usable memory %s is less than one block (%d tokens x %d B/token)", fmtBytes(b.UsableBytes), b.TokensPerBlock, b.BytesPerToken)
	case b.Capped:
		b.Reason = fmt.Sprintf("capped by MaxTokens %d (memory fits %d tokens)", b.MaxTokens, b.FitTokens)
	}
	return b, nil
}

// mul64 returns whether a*b overflows, and the product.
func mul64(a, b uint64) (overflow bool, p uint64) {
	if a != 0 && b > math.MaxUint64/a {
		return true, 0
	}
	return false, a * b
}

// mulFloor returns floor(f * n) computed exactly, for f in (0, 1].
func mulFloor(n uint64, f float64) uint64 {
	x := new(big.Float).SetPrec(128).SetUint64(n) // n needs 64 bits, f 53: 117 is exact
	x.Mul(x, new(big.Float).SetPrec(128).SetFloat64(f))
	u, _ := x.Uint64() // truncates toward zero; x <= n fits
	return u
}

// String explains the budget in one line, e.g.
//
//	KV budget 524288 tokens (16384 blocks of 32): free 80.00 GiB - reserve 2.00 GiB = 78.00 GiB; x 0.9 = 70.20 GiB usable; / 131072 B/token = 575078 tokens; rounded down to whole blocks
func (b Budget) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "KV budget %d tokens (%d blocks of %d): free %s - reserve %s", b.Tokens, b.Blocks, b.TokensPerBlock, fmtBytes(b.FreeBytes), fmtBytes(b.ReserveBytes))
	if b.ReserveBytes > b.FreeBytes {
		fmt.Fprintf(&s, " < 0")
	} else {
		fmt.Fprintf(&s, " = %s; x %v = %s usable; / %d B/token = %d tokens", fmtBytes(b.AvailableBytes), b.Fraction, fmtBytes(b.UsableBytes), b.BytesPerToken, b.FitTokens)
		if b.MaxTokens > 0 {
			fmt.Fprintf(&s, "; cap %d", b.MaxTokens)
		}
		s.WriteString("; rounded down to whole blocks")
	}
	if b.Reason != "" {
		s.WriteString(" (" + b.Reason + ")")
	}
	return s.String()
}

// fmtBytes formats n bytes as GiB or MiB with two decimals, or plain bytes
// below 1 MiB.
func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
