// Package prefix holds the router-side prefix index of adprouter: chained
// 64-bit hashes of full KV blocks, and a per-rank LRU of the blocks each rank
// is expected to cache, bounded by that rank's KV capacity and, all ranks
// together, by a total that does not grow with the number of ranks.
//
// The index predicts, from the router's own placements, what each rank's
// radix tree holds, so that requests of a new prompt that arrive in the same
// batch land together and a second allgather of probed match lengths becomes
// optional. Like the rest of the router it is deterministic: it is updated
// only by routing decisions, never iterates a map, and evicts by recency
// order alone.
package prefix

import "math/bits"

// Hash constants (odd, high-entropy 64-bit values).
const (
	k0 = 0xa0761d6478bd642f
	k1 = 0xe7037ed1a0b428db
	k2 = 0x8ebc6af09c88c6e3
	k3 = 0x589965cc75374cc3
)

// mix64 is the SplitMix64 finalizer, a bijection on uint64.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Mix is the SplitMix64 finalizer, a bijection on uint64 that spreads every
// input bit over every output bit. Block hashes use it, and so does the
// router's state digest.
func Mix(x uint64) uint64 { return mix64(x) }

// mum folds the 128-bit product of a and b into 64 bits.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// Root returns the hash every chain of a scope starts from. The LoRA adapter
// id and the cache salt are folded in so that blocks of different scopes
// never match each other, as engines scope block reuse.
func Root(loraID, cacheSalt uint64) uint64 {
	return mix64(mix64(loraID^k0) ^ cacheSalt ^ k1)
}

// Block returns the hash of one block of tokens chained to the hash of the
// block before it (or to Root for the first block). This is adprouter block
// hash v1:
//
//	words:   token pairs as little-endian uint64 (t[2w] low, t[2w+1] high;
//	         a lone last token fills the low half)
//	lanes:   a, b, c, d = k0, k1, k2, k3
//	         word w goes to lane w%4: lane = mum(lane ^ word, k(w%4))
//	content: mix64(a ^ rotl(b, 16) ^ rotl(c, 32) ^ rotl(d, 48) ^ len(tokens)*k3)
//	hash:    mix64(parent*k2 ^ content)
//
// with mum the xor of the high and low halves of the 128-bit product, mix64
// the SplitMix64 finalizer and k0..k3 the constants of this file. The
// content of a block does not depend on its parent, so the CPU hashes blocks
// in parallel and only the final mix is a serial chain.
func Block(parent uint64, tokens []int32) uint64 {
	return mix64(parent*k2 ^ content(tokens))
}

func content(tokens []int32) uint64 {
	a, b, c, d := uint64(k0), uint64(k1), uint64(k2), uint64(k3)
	t := tokens
	for len(t) >= 8 {
		a = mum(a^word(t[0], t[1]), k0)
		b = mum(b^word(t[2], t[3]), k1)
		c = mum(c^word(t[4], t[5]), k2)
		d = mum(d^word(t[6], t[7]), k3)
		t = t[8:]
	}
	for w := 0; len(t) > 0; w++ {
		var x uint64
		if len(t) >= 2 {
			x = word(t[0], t[1])
			t = t[2:]
		} else {
			x = uint64(uint32(t[0]))
			t = t[1:]
		}
		switch w {
		case 0:
			a = mum(a^x, k0)
		case 1:
			b = mum(b^x, k1)
		case 2:
			c = mum(c^x, k2)
		default:
			d = mum(d^x, k3)
		}
	}
	return mix64(a ^ bits.RotateLeft64(b, 16) ^ bits.RotateLeft64(c, 32) ^
		bits.RotateLeft64(d, 48) ^ uint64(len(tokens))*k3)
}

func word(lo, hi int32) uint64 { return uint64(uint32(lo)) | uint64(uint32(hi))<<32 }

// AppendHashes appends to dst the chained hashes of the full blocks of
// tokensPerBlock tokens in tokens, starting from Root(loraID, cacheSalt), and
// returns the extended slice. A partial last block is not hashed: engines
// cache only full blocks. Pass the prompt without its last token, as engines
// cache it (the last token's KV is computed at the first decode step).
func AppendHashes(dst []uint64, tokens []int32, tokensPerBlock int, loraID, cacheSalt uint64) []uint64 {
	if tokensPerBlock < 1 {
		return dst
	}
	h := Root(loraID, cacheSalt)
	for len(tokens) >= tokensPerBlock {
		h = Block(h, tokens[:tokensPerBlock])
		dst = append(dst, h)
		tokens = tokens[tokensPerBlock:]
	}
	return dst
}
