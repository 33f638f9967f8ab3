package kvsize

import "fmt"

// GuardInput is what [Guard] decides a rank's admissible KV from. The
// engine's own pool is the truth for occupancy (after start-up the engine
// has preallocated its pool, so device free memory no longer moves with the
// cache); device free memory is only the guard against others growing into
// the GPU.
type GuardInput struct {
	// CapacityTokens is the engine's KV pool size in tokens.
	CapacityTokens uint64
	// FreeTokens is how many of those are free now; at most CapacityTokens.
	FreeTokens uint64
	// DeviceFreeBytes is the GPU's free memory now (MemoryInfo.FreeBytes,
	// usually from a Monitor).
	DeviceFreeBytes uint64
	// GuardBandBytes is the free device memory below which the rank is
	// under memory pressure; 0 disables the guard.
	GuardBandBytes uint64
	// BytesPerToken converts the shortfall into tokens; must be > 0.
	BytesPerToken uint64
}

// Admission is the KV a rank may admit, with the figures behind it.
//
//	DeficitBytes   = GuardBandBytes - DeviceFreeBytes   (0 when free >= band)
//	ShrinkTokens   = ceil(DeficitBytes / BytesPerToken)
//	CapacityTokens = input CapacityTokens - ShrinkTokens (not below 0)
//	FreeTokens     = input FreeTokens - ShrinkTokens     (not below 0)
type Admission struct {
	Input GuardInput // what the admission was computed from

	DeficitBytes uint64 // how far free device memory is below the band
	ShrinkTokens uint64 // DeficitBytes in tokens, rounded up

	// CapacityTokens and FreeTokens are the admissible capacity and free
	// KV tokens: what the rank should report to routing.
	CapacityTokens uint64
	FreeTokens     uint64 // admissible free KV tokens
	// MemoryPressure is true when free device memory is below the band.
	MemoryPressure bool
}

// Guard returns the KV a rank may admit: when free device memory is below
// the guard band, both the capacity and the free KV shrink by the deficit,
// in whole tokens rounded up, never below 0, and MemoryPressure is set.
// Otherwise the engine's figures pass through unchanged.
//
// It returns an error wrapping ErrInvalid when FreeTokens exceeds
// CapacityTokens or BytesPerToken is 0. Guard is pure arithmetic; the
// reading it needs comes from a [Monitor], outside routing.
func Guard(in GuardInput) (Admission, error) {
	if in.BytesPerToken == 0 {
		return Admission{}, invalidf("GuardInput.BytesPerToken is 0; want the KV bytes of one token, > 0")
	}
	if in.FreeTokens > in.CapacityTokens {
		return Admission{}, invalidf("GuardInput.FreeTokens %d exceeds CapacityTokens %d; want free <= capacity", in.FreeTokens, in.CapacityTokens)
	}
	a := Admission{Input: in, CapacityTokens: in.CapacityTokens, FreeTokens: in.FreeTokens}
	if in.DeviceFreeBytes >= in.GuardBandBytes {
		return a, nil
	}
	a.MemoryPressure = true
	a.DeficitBytes = in.GuardBandBytes - in.DeviceFreeBytes
	a.ShrinkTokens = a.DeficitBytes / in.BytesPerToken
	if a.DeficitBytes%in.BytesPerToken != 0 {
		a.ShrinkTokens++
	}
	a.CapacityTokens = subFloor0(a.CapacityTokens, a.ShrinkTokens)
	a.FreeTokens = subFloor0(a.FreeTokens, a.ShrinkTokens)
	return a, nil
}

func subFloor0(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

// String explains the admission in one line, e.g.
//
//	admit 90000/100000 free/capacity tokens: device free 1.00 GiB < guard band 2.00 GiB, deficit 1.00 GiB = 8192 tokens (memory pressure)
func (a Admission) String() string {
	if !a.MemoryPressure {
		return fmt.Sprintf("admit %d/%d free/capacity tokens: device free %s >= guard band %s",
			a.FreeTokens, a.CapacityTokens, fmtBytes(a.Input.DeviceFreeBytes), fmtBytes(a.Input.GuardBandBytes))
	}
	return fmt.Sprintf("admit %d/%d free/capacity tokens (engine %d/%d): device free %s < guard band %s, deficit %s = %d tokens at %d B/token (memory pressure)",
		a.FreeTokens, a.CapacityTokens, a.Input.FreeTokens, a.Input.CapacityTokens,
		fmtBytes(a.Input.DeviceFreeBytes), fmtBytes(a.Input.GuardBandBytes), fmtBytes(a.DeficitBytes), a.ShrinkTokens, a.Input.BytesPerToken)
}
