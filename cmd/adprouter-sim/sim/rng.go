package sim

import (
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/adprouter/adprouter/router"
)

// rng is the simulator's only source of randomness: a ChaCha8 generator
// from math/rand/v2, whose output is fixed by its algorithm, with our own
// derivation of integers, floats and distributions on top, so that a seed
// names the same workload whatever the Go release. Never the global source,
// never the clock. ChaCha8 (rather than PCG) because its streams are
// independent however alike their seeds: (seed, stream) is used as the key
// as it is.
type rng struct{ src *rand.ChaCha8 }

// Independent streams of one seed: each part of a workload draws from its
// own stream, so that changing, say, the prompt lengths does not move the
// arrival times.
const (
	streamArrivals uint64 = iota + 1
	streamLengths
	streamTokens
	streamGroups
	streamThink
	streamFollowUp
	// streamJitter's substreams (newSubRNG) are the arrival jitters
	// (WorkloadConfig.JitterSeed).
	streamJitter
	// streamMix's substream i draws the seed of a mix's part i.
	streamMix
	// streamShapes draws EvalRandom's cases.
	streamShapes
	// streamTraceTail + line is the stream of the tokens of a trace
	// request that its hash ids do not cover.
	streamTraceTail uint64 = 1 << 48
	// streamAnswer + id is the stream of request id's answer tokens.
	streamAnswer uint64 = 1 << 32
	// streamTraceBlock | id is the stream of trace block id's tokens.
	streamTraceBlock uint64 = 1 << 63
)

// newRNG returns stream number stream of seed (its substream 0).
func newRNG(seed, stream uint64) *rng { return newSubRNG(seed, stream, 0) }

// newSubRNG returns substream sub of stream number stream of seed: as
// independent of the others as the streams are.
func newSubRNG(seed, stream, sub uint64) *rng {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], seed)
	binary.LittleEndian.PutUint64(key[8:], stream)
	binary.LittleEndian.PutUint64(key[16:], sub)
	return &rng{rand.NewChaCha8(key)}
}

func (r *rng) uint64() uint64 { return r.src.Uint64() }

// float64 returns a uniform float in [0, 1) with 53 random bits.
func (r *rng) float64() float64 { return float64(r.src.Uint64()>>11) / (1 << 53) }

// intn returns a uniform int in [0, n) (Lemire's unbiased multiply method).
func (r *rng) intn(n int) int {
	if n <= 1 {
		return 0
	}
	bound := uint64(n)
	threshold := -bound % bound
	for {
		hi, lo := bits.Mul64(r.src.Uint64(), bound)
		if lo >= threshold {
			return int(hi)
		}
	}
}

// between returns a uniform int in [lo, hi] (lo when hi <= lo).
func (r *rng) between(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + r.intn(hi-lo+1)
}

// exp returns an exponential variate with the given mean.
func (r *rng) exp(mean float64) float64 {
	return -mean * math.Log(1-r.float64()) // 1-u is in (0, 1]
}

// geometric returns a geometric variate on {1, 2, ...} with the given mean
// (>= 1).
func (r *rng) geometric(mean float64) int {
	if mean <= 1 {
		return 1
	}
	p := 1 / mean
	return 1 + int(math.Floor(math.Log(1-r.float64())/math.Log(1-p)))
}

// tokens appends n uniform token ids in [0, vocab) to dst.
func (r *rng) tokens(dst []int32, n, vocab int) []int32 {
	for range n {
		dst = append(dst, int32(r.intn(vocab)))
	}
	return dst
}

// AppendBlockHashes extends hashes, the chained hashes of the first
// len(hashes) full blocks of tokens, with those of the remaining full blocks
// (tokensPerBlock tokens each; a trailing partial block is not hashed): the
// project's block hash (router.AppendBlockHashes) with no LoRA and no salt.
func AppendBlockHashes(hashes []uint64, tokens []int32, tokensPerBlock int) []uint64 {
	return router.AppendBlockHashes(hashes, tokens, tokensPerBlock, 0, 0)
}
