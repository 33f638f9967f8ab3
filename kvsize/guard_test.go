package kvsize_test

import (
	"fmt"
	"testing"

	"github.com/adprouter/adprouter/kvsize"
)

func TestGuard(t *testing.T) {
	const bpt = 1000
	tests := []struct {
		name string
		in   kvsize.GuardInput
		want kvsize.Admission
	}{{
		name: "above the band: unchanged",
		in:   kvsize.GuardInput{CapacityTokens: 1000, FreeTokens: 400, DeviceFreeBytes: 5000, GuardBandBytes: 4000, BytesPerToken: bpt},
		want: kvsize.Admission{CapacityTokens: 1000, FreeTokens: 400},
	}, {
		name: "exactly at the band: unchanged",
		in:   kvsize.GuardInput{CapacityTokens: 1000, FreeTokens: 400, DeviceFreeBytes: 4000, GuardBandBytes: 4000, BytesPerToken: bpt},
		want: kvsize.Admission{CapacityTokens: 1000, FreeTokens: 400},
	}, {
		name: "guard disabled",
		in:   kvsize.GuardInput{CapacityTokens: 1000, FreeTokens: 400, BytesPerToken: bpt},
		want: kvsize.Admission{CapacityTokens: 1000, FreeTokens: 400},
	}, {
		name: "deficit of whole tokens",
		in:   kvsize.GuardInput{CapacityTokens: 1000, FreeTokens: 400, DeviceFreeBytes: 1000, GuardBandBytes: 4000, BytesPerToken: bpt},
		want: kvsize.Admission{DeficitBytes: 3000, ShrinkTokens: 3, CapacityTokens: 997, FreeTokens: 397, MemoryPressure: true},
	}, {
		name: "deficit rounds up",
		in:   kvsize.GuardInput{CapacityTokens: 1000, FreeTokens: 400, DeviceFreeBytes: 2999, GuardBandBytes: 4000, BytesPerToken: bpt},
		want: kvsize.Admission{DeficitBytes: 1001, ShrinkTokens: 2, CapacityTokens: 998, FreeTokens: 398, MemoryPressure: true},
	}, {
		name: "free never below 0",
		in:   kvsize.GuardInput{CapacityTokens: 1000, FreeTokens: 2, DeviceFreeBytes: 0, GuardBandBytes: 4000, BytesPerToken: bpt},
		want: kvsize.Admission{DeficitBytes: 4000, ShrinkTokens: 4, CapacityTokens: 996, FreeTokens: 0, MemoryPressure: true},
	}, {
		name: "capacity never below 0",
		in:   kvsize.GuardInput{CapacityTokens: 3, FreeTokens: 3, DeviceFreeBytes: 0, GuardBandBytes: 1 << 40, BytesPerToken: bpt},
		want: kvsize.Admission{DeficitBytes: 1 << 40, ShrinkTokens: 1099511628, MemoryPressure: true},
	}, {
		name: "empty pool",
		in:   kvsize.GuardInput{DeviceFreeBytes: 0, GuardBandBytes: 1, BytesPerToken: bpt},
		want: kvsize.Admission{DeficitBytes: 1, ShrinkTokens: 1, MemoryPressure: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Input = tt.in
			got, err := kvsize.Guard(tt.in)
			wantValue(t, fmt.Sprintf("Guard(%+v)", tt.in), got, err, tt.want)
		})
	}
}

func TestGuardInvalid(t *testing.T) {
	tests := []struct {
		name string
		in   kvsize.GuardInput
		want string
	}{
		{"no bytes per token", kvsize.GuardInput{CapacityTokens: 10, FreeTokens: 5}, "BytesPerToken is 0"},
		{"free exceeds capacity", kvsize.GuardInput{CapacityTokens: 10, FreeTokens: 11, BytesPerToken: 1}, "FreeTokens 11 exceeds CapacityTokens 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kvsize.Guard(tt.in)
			wantInvalid(t, fmt.Sprintf("Guard(%+v)", tt.in), got, err, tt.want)
		})
	}
}

func ExampleGuard() {
	// Another process took memory: the GPU has 1 GiB free, below the 2 GiB
	// guard band, so the rank admits 1 GiB worth of tokens less.
	a, err := kvsize.Guard(kvsize.GuardInput{
		CapacityTokens:  500000,
		FreeTokens:      120000,
		DeviceFreeBytes: 1 << 30,
		GuardBandBytes:  2 << 30,
		BytesPerToken:   131072,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(a.FreeTokens, a.CapacityTokens, a.MemoryPressure)
	fmt.Println(a)
	// Output:
	// 111808 491808 true
	// admit 111808/491808 free/capacity tokens (engine 120000/500000): device free 1.00 GiB < guard band 2.00 GiB, deficit 1.00 GiB = 8192 tokens at 131072 B/token (memory pressure)
}
