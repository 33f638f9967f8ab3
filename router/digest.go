package router

import (
	"math"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// StateDigest returns a 64-bit digest of the Router's state: a running hash
// seeded with its configuration and chained, as they happen, over every change
// of the state that determines its future decisions — cold-start warmup ranks
// reached (and, under quiet warmup, whether the last decision warmed one,
// whether the engine has been seen loaded and for how many decisions it has
// carried requests), conversation bindings and touches (recency), the
// round-robin cursor, prefix-index bounds and placements (which also drive
// the demand window), and the predicted-TTFT score's queued prefill per
// rank. It costs O(1) per change: nothing is walked.
//
// Routers built from the same Config and fed the same calls have the same
// digest. A digest names a history, not just a state: routers whose states
// differ have different digests (but for a 2^-64 chance), and so, usually, do
// routers that reached one state by different calls. Calls that change
// nothing (the default policy's, or a rejected call) leave it as it was.
// Comparing digests across ranks every iteration (e.g. with an MPI allreduce
// of min and max) detects a rank whose inputs diverged before the divergence
// costs a deadlock.
func (r *Router) StateDigest() uint64 { return r.digest }

// Tags of the changes folded into the digest.
const (
	tagConfig = 1
	tagWarmed = 2
	tagBind   = 3
	tagTouch  = 4
	tagCursor = 5
	tagLimit  = 6
	tagPlace  = 7
	tagQueued = 8
	// tagPendingSet: SetPendingWarmup replaced the pending set.
	tagPendingSet = 9
	// tagRampStall: the ttft score's last decision made a ramp replica
	// (1) or not (0).
	tagRampStall = 10
	// tagLoaded: quiet warmup saw the engine loaded for the first time.
	tagLoaded = 11
	// tagWarmStall: quiet warmup's last decision warmed a rank (1) or not
	// (0).
	tagWarmStall = 12
	// tagBusy: quiet warmup's count of decisions since one found no
	// request active (see Router.warming), after the change.
	tagBusy = 13
	// tagFlightHeld: the ttft score left a request (id, and the rank it
	// would have taken) for its prompt in flight; the next decision does
	// not hold it so again.
	tagFlightHeld = 14
)

// fold chains one change (tag, a, b) into digest d. Each step is a bijection
// of d for fixed inputs: once two digests differ, the same later changes
// keep them different.
func fold(d, tag, a, b uint64) uint64 {
	return prefix.Mix(prefix.Mix(d^tag*0x9e3779b97f4a7c15^a) ^ b)
}

// hashString hashes a conversation id, eight bytes at a time (each word
// little-endian, a short last one zero-extended).
func hashString(s string) uint64 {
	h := prefix.Mix(uint64(len(s)) ^ 0x2545f4914f6cdd1d)
	for ; len(s) >= 8; s = s[8:] {
		// One 8-byte load: the compiler merges these byte reads.
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = prefix.Mix(h ^ w)
	}
	if len(s) > 0 {
		var w uint64
		for i := range len(s) {
			w |= uint64(s[i]) << (8 * i)
		}
		h = prefix.Mix(h ^ w)
	}
	return h
}

// configDigest is the digest of a new Router: every option, exactly (floats
// by their bits), and the initial state they imply.
func configDigest(c *Config) uint64 {
	d := uint64(0)
	u64 := func(v uint64) { d = fold(d, tagConfig, v, 0) }
	str := func(s string) { d = fold(d, tagConfig, hashString(s), 0) }
	str(string(c.Policy))
	u64(uint64(c.DPSize))
	u64(math.Float64bits(c.LoadBalanceWeight))
	u64(math.Float64bits(c.MatchRateThreshold))
	u64(math.Float64bits(c.FairShareMultiplier))
	u64(b2u(c.ColdStartWarmup))
	u64(uint64(c.MaxSessions))
	str(string(c.NewConvPlacement))
	u64(b2u(c.CapacityAware))
	u64(uint64(c.TokensPerBlock))
	str(string(c.PrefixSource))
	u64(uint64(c.IndexCapacityBlocks))
	u64(uint64(c.IndexMaxBytes))
	str(string(c.Warmup))
	u64(math.Float64bits(c.WarmupFactor))
	u64(uint64(c.WarmupWindow))
	u64(uint64(c.WarmupMinRequests))
	if c.Score != ScoreReference {
		// Only then: the reference configurations keep their digests.
		str(string(c.Score))
		str(string(c.EngineReuse))
		u64(uint64(c.TTFTDrainTokens))
	}
	return d
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
