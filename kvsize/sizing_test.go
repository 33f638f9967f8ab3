package kvsize_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/kvsize"
)

const gib = 1 << 30

func TestSizeKV(t *testing.T) {
	tests := []struct {
		name string
		in   kvsize.SizeInput
		want kvsize.Budget
	}{{
		name: "defaults",
		in:   kvsize.SizeInput{FreeBytes: 80 * gib, ReserveBytes: 2 * gib, BytesPerToken: 131072},
		want: kvsize.Budget{
			FreeBytes: 80 * gib, ReserveBytes: 2 * gib, Fraction: 0.9, BytesPerToken: 131072, TokensPerBlock: 32,
			AvailableBytes: 78 * gib,
			UsableBytes:    75376676044, // floor(0.9 * 78 GiB)
			FitTokens:      575078,
			Tokens:         575072, Blocks: 17971,
		},
	}, {
		name: "whole fraction, exact fit",
		in:   kvsize.SizeInput{FreeBytes: 64 * 1024, Fraction: 1, BytesPerToken: 1024, TokensPerBlock: 16},
		want: kvsize.Budget{
			FreeBytes: 64 * 1024, Fraction: 1, BytesPerToken: 1024, TokensPerBlock: 16,
			AvailableBytes: 64 * 1024, UsableBytes: 64 * 1024, FitTokens: 64, Tokens: 64, Blocks: 4,
		},
	}, {
		name: "half, rounded down to blocks",
		in:   kvsize.SizeInput{FreeBytes: 1000, Fraction: 0.5, BytesPerToken: 3, TokensPerBlock: 8},
		want: kvsize.Budget{
			FreeBytes: 1000, Fraction: 0.5, BytesPerToken: 3, TokensPerBlock: 8,
			AvailableBytes: 1000, UsableBytes: 500, FitTokens: 166, Tokens: 160, Blocks: 20,
		},
	}, {
		name: "capped",
		in:   kvsize.SizeInput{FreeBytes: 80 * gib, BytesPerToken: 131072, MaxTokens: 100010},
		want: kvsize.Budget{
			FreeBytes: 80 * gib, Fraction: 0.9, BytesPerToken: 131072, TokensPerBlock: 32, MaxTokens: 100010,
			AvailableBytes: 80 * gib, UsableBytes: 77309411328, FitTokens: 589824,
			Tokens: 100000, Blocks: 3125, Capped: true, // the cap, rounded down to whole blocks
			Reason: "capped by MaxTokens 100010 (memory fits 589824 tokens)",
		},
	}, {
		name: "cap above what fits is not applied",
		in:   kvsize.SizeInput{FreeBytes: 1 << 20, Fraction: 1, BytesPerToken: 1024, MaxTokens: 1 << 40},
		want: kvsize.Budget{
			FreeBytes: 1 << 20, Fraction: 1, BytesPerToken: 1024, TokensPerBlock: 32, MaxTokens: 1 << 40,
			AvailableBytes: 1 << 20, UsableBytes: 1 << 20, FitTokens: 1024, Tokens: 1024, Blocks: 32,
		},
	}, {
		name: "reserve exceeds free",
		in:   kvsize.SizeInput{FreeBytes: 6 * gib, ReserveBytes: 8 * gib, BytesPerToken: 131072},
		want: kvsize.Budget{
			FreeBytes: 6 * gib, ReserveBytes: 8 * gib, Fraction: 0.9, BytesPerToken: 131072, TokensPerBlock: 32,
			Reason: "reserve 8.00 GiB exceeds free memory 6.00 GiB: no memory left for the KV cache",
		},
	}, {
		name: "less than one block",
		in:   kvsize.SizeInput{FreeBytes: 31 * 1024, Fraction: 1, BytesPerToken: 1024},
		want: kvsize.Budget{
			FreeBytes: 31 * 1024, Fraction: 1, BytesPerToken: 1024, TokensPerBlock: 32,
			AvailableBytes: 31 * 1024, UsableBytes: 31 * 1024, FitTokens: 31,
			Reason: "usable memory 31744 B is less than one block (32 tokens x 1024 B/token)",
		},
	}, {
		name: "cap below one block",
		in:   kvsize.SizeInput{FreeBytes: 1 << 20, Fraction: 1, BytesPerToken: 1, MaxTokens: 10},
		want: kvsize.Budget{
			FreeBytes: 1 << 20, Fraction: 1, BytesPerToken: 1, TokensPerBlock: 32, MaxTokens: 10,
			AvailableBytes: 1 << 20, UsableBytes: 1 << 20, FitTokens: 1 << 20, Capped: true,
			Reason: "cap of 10 tokens is less than one block of 32 tokens",
		},
	}, {
		name: "no free memory",
		in:   kvsize.SizeInput{BytesPerToken: 1},
		want: kvsize.Budget{
			Fraction: 0.9, BytesPerToken: 1, TokensPerBlock: 32,
			Reason: "usable memory 0 B is less than one block (32 tokens x 1 B/token)",
		},
	}, {
		name: "largest free memory, no overflow",
		in:   kvsize.SizeInput{FreeBytes: math.MaxUint64, Fraction: 1, BytesPerToken: 1, TokensPerBlock: 1},
		want: kvsize.Budget{
			FreeBytes: math.MaxUint64, Fraction: 1, BytesPerToken: 1, TokensPerBlock: 1,
			AvailableBytes: math.MaxUint64, UsableBytes: math.MaxUint64, FitTokens: math.MaxUint64,
			Tokens: math.MaxUint64, Blocks: math.MaxUint64,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kvsize.SizeKV(tt.in)
			wantValue(t, fmt.Sprintf("SizeKV(%+v)", tt.in), got, err, tt.want)
			assert.Equal(t, got.Blocks*got.TokensPerBlock, got.Tokens, "Tokens against Blocks %d x TokensPerBlock %d", got.Blocks, got.TokensPerBlock)
		})
	}
}

func TestSizeKVInvalid(t *testing.T) {
	tests := []struct {
		name string
		in   kvsize.SizeInput
		want string
	}{
		{"fraction above 1", kvsize.SizeInput{FreeBytes: 1, Fraction: 1.5, BytesPerToken: 1}, "Fraction is 1.5"},
		{"negative fraction", kvsize.SizeInput{FreeBytes: 1, Fraction: -0.1, BytesPerToken: 1}, "Fraction is -0.1"},
		{"NaN fraction", kvsize.SizeInput{FreeBytes: 1, Fraction: math.NaN(), BytesPerToken: 1}, "Fraction is NaN"},
		{"infinite fraction", kvsize.SizeInput{FreeBytes: 1, Fraction: math.Inf(1), BytesPerToken: 1}, "Fraction is +Inf"},
		{"no bytes per token", kvsize.SizeInput{FreeBytes: 1}, "BytesPerToken is 0"},
		{"block overflows", kvsize.SizeInput{FreeBytes: 1, BytesPerToken: 1 << 60, TokensPerBlock: 1 << 10}, "overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kvsize.SizeKV(tt.in)
			wantInvalid(t, fmt.Sprintf("SizeKV(%+v)", tt.in), got, err, tt.want)
		})
	}
}

func TestBudgetString(t *testing.T) {
	b, err := kvsize.SizeKV(kvsize.SizeInput{FreeBytes: 6 * gib, ReserveBytes: 8 * gib, BytesPerToken: 131072})
	require.NoError(t, err)
	want := "KV budget 0 tokens (0 blocks of 32): free 6.00 GiB - reserve 8.00 GiB < 0 (reserve 8.00 GiB exceeds free memory 6.00 GiB: no memory left for the KV cache)"
	assert.Equal(t, want, b.String(), "Budget.String()")
}

func ExampleSizeKV() {
	// Llama-3.1-8B in bf16 on a GPU with 80 GiB free after loading the
	// weights, keeping 2 GiB back for activations.
	shape := kvsize.KVShape{Attention: kvsize.AttentionGQA, Layers: 32, KVHeads: 8, HeadDim: 128, DType: kvsize.DTypeBF16}
	bpt, err := shape.BytesPerToken()
	if err != nil {
		panic(err)
	}
	b, err := kvsize.SizeKV(kvsize.SizeInput{FreeBytes: 80 << 30, ReserveBytes: 2 << 30, BytesPerToken: bpt})
	if err != nil {
		panic(err)
	}
	fmt.Println(b.Tokens, b.Blocks)
	fmt.Println(b)
	// Output:
	// 575072 17971
	// KV budget 575072 tokens (17971 blocks of 32): free 80.00 GiB - reserve 2.00 GiB = 78.00 GiB; x 0.9 = 70.20 GiB usable; / 131072 B/token = 575078 tokens; rounded down to whole blocks
}
