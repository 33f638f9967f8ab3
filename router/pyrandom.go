package router

import "math/bits"

// This file reproduces, bit for bit, the parts of CPython's random module that
// the reference router's tie-break uses: random.Random(seed) for a
// non-negative integer seed, getrandbits(k) for k <= 32, the rejection-sampling
// _randbelow and shuffle. The algorithms are MT19937 (Matsumoto & Nishimura)
// seeded with init_by_array, as CPython's _randommodule.c does.

const (
	mtN         = 624
	mtM         = 397
	mtMatrixA   = 0x9908b0df
	mtUpperMask = 0x80000000
	mtLowerMask = 0x7fffffff

	// mtFastOutputs is how many outputs can be produced from a freshly
	// seeded state without running the full 624-word twist: output t < 227
	// depends only on the seeded words t, t+1 and t+397.
	mtFastOutputs = mtN - mtM

	// mtLanes is the most generators the vector seeders seed at once: the
	// widest of router/internal/seedwidths (TestSeederTable checks).
	mtLanes = 96
)

// mtGenrandBase is init_genrand(19650218), the first step of every
// init_by_array. It does not depend on the seed, so it is computed once.
var mtGenrandBase = func() (mt [mtN]uint32) {
	mt[0] = 19650218
	for i := 1; i < mtN; i++ {
		mt[i] = 1812433253*(mt[i-1]^(mt[i-1]>>30)) + uint32(i)
	}
	return mt
}()

// seedAddends returns the per-step key addends of init_by_array's first loop
// for the key CPython derives from seed (its 32-bit words, least significant
// first; one word for seeds below 2^32). Step s adds key[s%len] + s%len; with
// at most two words the addend alternates between odd and even values of the
// loop index i = s+1.
func seedAddends(seed uint64) (odd, even uint32) {
	lo, hi := uint32(seed), uint32(seed>>32)
	if hi == 0 {
		return lo, lo
	}
	return lo, hi + 1
}

// mtSeed fills mt with the state of random.Random(seed).
func mtSeed(mt *[mtN]uint32, seed uint64) {
	odd, even := seedAddends(seed)
	// First loop: mtN steps over i = 1..623, then i = 1 again after the wrap.
	p := mtGenrandBase[0]
	for i := 1; i < mtN; i++ {
		add := odd
		if i&1 == 0 {
			add = even
		}
		p = (mtGenrandBase[i] ^ ((p ^ (p >> 30)) * 1664525)) + add
		mt[i] = p
	}
	mt[0] = p
	// Step s = 623 (odd) at i = 1 uses the second addend.
	p = (mt[1] ^ ((p ^ (p >> 30)) * 1664525)) + even
	mt[1] = p
	// Second loop: mtN-1 steps over i = 2..623, then i = 1 after the wrap.
	for i := 2; i < mtN; i++ {
		p = (mt[i] ^ ((p ^ (p >> 30)) * 1566083941)) - uint32(i)
		mt[i] = p
	}
	mt[0] = p
	mt[1] = (mt[1] ^ ((p ^ (p >> 30)) * 1566083941)) - 1
	mt[0] = 0x80000000
}

// mtSeed4 seeds four generators at once. The seeding chain is a long run of
// dependent multiplies; interleaving four independent chains lets the CPU
// overlap them, which is several times faster than four calls to mtSeed.
func mtSeed4(mt *[4][mtN]uint32, seeds *[4]uint64) {
	o0, e0 := seedAddends(seeds[0])
	o1, e1 := seedAddends(seeds[1])
	o2, e2 := seedAddends(seeds[2])
	o3, e3 := seedAddends(seeds[3])
	m0, m1, m2, m3 := &mt[0], &mt[1], &mt[2], &mt[3]
	p0 := mtGenrandBase[0]
	p1, p2, p3 := p0, p0, p0
	for i := 1; i < mtN; i++ {
		b := mtGenrandBase[i]
		a0, a1, a2, a3 := o0, o1, o2, o3
		if i&1 == 0 {
			a0, a1, a2, a3 = e0, e1, e2, e3
		}
		p0 = (b ^ ((p0 ^ (p0 >> 30)) * 1664525)) + a0
		p1 = (b ^ ((p1 ^ (p1 >> 30)) * 1664525)) + a1
		p2 = (b ^ ((p2 ^ (p2 >> 30)) * 1664525)) + a2
		p3 = (b ^ ((p3 ^ (p3 >> 30)) * 1664525)) + a3
		m0[i], m1[i], m2[i], m3[i] = p0, p1, p2, p3
	}
	p0 = (m0[1] ^ ((p0 ^ (p0 >> 30)) * 1664525)) + e0
	p1 = (m1[1] ^ ((p1 ^ (p1 >> 30)) * 1664525)) + e1
	p2 = (m2[1] ^ ((p2 ^ (p2 >> 30)) * 1664525)) + e2
	p3 = (m3[1] ^ ((p3 ^ (p3 >> 30)) * 1664525)) + e3
	m0[1], m1[1], m2[1], m3[1] = p0, p1, p2, p3
	for i := 2; i < mtN; i++ {
		k := uint32(i)
		p0 = (m0[i] ^ ((p0 ^ (p0 >> 30)) * 1566083941)) - k
		p1 = (m1[i] ^ ((p1 ^ (p1 >> 30)) * 1566083941)) - k
		p2 = (m2[i] ^ ((p2 ^ (p2 >> 30)) * 1566083941)) - k
		p3 = (m3[i] ^ ((p3 ^ (p3 >> 30)) * 1566083941)) - k
		m0[i], m1[i], m2[i], m3[i] = p0, p1, p2, p3
	}
	m0[1] = (m0[1] ^ ((p0 ^ (p0 >> 30)) * 1566083941)) - 1
	m1[1] = (m1[1] ^ ((p1 ^ (p1 >> 30)) * 1566083941)) - 1
	m2[1] = (m2[1] ^ ((p2 ^ (p2 >> 30)) * 1566083941)) - 1
	m3[1] = (m3[1] ^ ((p3 ^ (p3 >> 30)) * 1566083941)) - 1
	m0[0], m1[0], m2[0], m3[0] = 0x80000000, 0x80000000, 0x80000000, 0x80000000
}

func mtTemper(y uint32) uint32 {
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func mtMix(a, b, c uint32) uint32 {
	y := (a & mtUpperMask) | (b & mtLowerMask)
	v := c ^ (y >> 1)
	if y&1 != 0 {
		v ^= mtMatrixA
	}
	return v
}

// mtFirstOutputs writes the first len(out) (at most mtFastOutputs) outputs
// of genrand_uint32 for the freshly seeded state mt, without twisting the
// whole state.
func mtFirstOutputs(mt *[mtN]uint32, out []uint32) {
	out = out[:min(len(out), mtFastOutputs)]
	for t := range out {
		out[t] = mtTemper(mtMix(mt[t], mt[t+1], mt[t+mtM]))
	}
}

// pyRandom is a complete MT19937 generator equal to CPython's
// random.Random(seed) for seeds in [0, 2^64). It is the general (slow) path;
// the router normally consumes precomputed outputs (see mtStream).
type pyRandom struct {
	mt  [mtN]uint32
	mti int
}

func (r *pyRandom) seed(seed uint64) {
	mtSeed(&r.mt, seed)
	r.mti = mtN
}

func (r *pyRandom) uint32() uint32 {
	if r.mti >= mtN {
		mt := &r.mt
		for k := 0; k < mtN-mtM; k++ {
			mt[k] = mtMix(mt[k], mt[k+1], mt[k+mtM])
		}
		for k := mtN - mtM; k < mtN-1; k++ {
			mt[k] = mtMix(mt[k], mt[k+1], mt[k+mtM-mtN])
		}
		mt[mtN-1] = mtMix(mt[mtN-1], mt[0], mt[mtM-1])
		r.mti = 0
	}
	y := r.mt[r.mti]
	r.mti++
	return mtTemper(y)
}

// mtStream yields the genrand_uint32 outputs of one seed: first from a
// precomputed prefix (every stride-th word of prefix, from its first; stride
// 0 means 1), then, if a shuffle needs more (rare: a long run of rejections or
// a very large dp_size), from a fully seeded pyRandom that skips what the
// prefix already gave.
type mtStream struct {
	seed     uint64
	prefix   []uint32
	stride   int
	pos      int // outputs taken
	at       int // index in prefix of the next output
	fallback *pyRandom

	// accepted, when acceptM > 1, marks the prefix outputs that a shuffle
	// of acceptM items accepts (bit t: output t), computed beside the
	// seeding; see shuffleAccepted.
	accepted uint64
	acceptM  int
}

func (s *mtStream) next() uint32 {
	if s.at < len(s.prefix) {
		v := s.prefix[s.at]
		s.at += max(s.stride, 1)
		s.pos++
		return v
	}
	return s.generate()
}

// generate returns the next output once the prefix is used up.
func (s *mtStream) generate() uint32 {
	if s.fallback == nil {
		s.fallback = new(pyRandom)
		s.fallback.seed(s.seed)
		for range s.pos {
			s.fallback.uint32()
		}
	}
	s.pos++
	return s.fallback.uint32()
}

// shuffle permutes x exactly as CPython's Random.shuffle does with this
// stream: for i from len-1 down to 1 swap x[i] with x[_randbelow(i+1)],
// where _randbelow(n) draws k = bit_length(n) top bits of an output until
// the value is below n. It is the tie-break's inner loop, so draws from the
// prefix are inlined.
func (s *mtStream) shuffle(x []int) {
	if s.acceptM == len(x) && s.at == 0 && s.acceptM > 1 &&
		bits.OnesCount64(s.accepted) >= len(x)-1 {
		s.shuffleAccepted(x)
		return
	}
	stride := max(s.stride, 1)
	for i := len(x) - 1; i > 0; i-- {
		n := uint32(i + 1)
		shift := 32 - uint(bits.Len32(n))
		var j uint32
		for {
			var v uint32
			if s.at < len(s.prefix) {
				v = s.prefix[s.at]
				s.at += stride
				s.pos++
			} else {
				v = s.generate()
			}
			if j = v >> shift; j < n {
				break
			}
		}
		x[i], x[j] = x[j], x[i]
	}
}

// shuffleAccepted is shuffle for a fresh stream whose accepted draws are
// known (at least len(x)-1 of them, for a shuffle of len(x) items): the
// rejections were resolved eight streams at a time beside the seeding, so
// what is left walks the marked draws with no unpredictable branch. Draw t
// accepted for position i gives j = the draw's top bit_length(i+1) bits, as
// in shuffle.
func (s *mtStream) shuffleAccepted(x []int) {
	stride := max(s.stride, 1)
	mask := s.accepted
	t := 0
	// shift is 32 - bit_length(i+1); it grows by one below each power of two.
	shift := uint(bits.LeadingZeros32(uint32(len(x))))
	for i := len(x) - 1; i > 0; i-- {
		t = bits.TrailingZeros64(mask)
		mask &= mask - 1
		j := s.prefix[t*stride] >> (shift & 31)
		x[i], x[j] = x[j], x[i]
		if i&(i+1) == 0 {
			shift++
		}
	}
	s.pos = t + 1
	s.at = s.pos * stride
}

// PyShuffle shuffles x in place exactly as CPython's
// random.Random(seed).shuffle(x) would, for any uint64 seed. It is the
// tie-break of the KV-cache-aware policy, exported so that hosts and tests can
// check it against Python directly.
func PyShuffle(seed uint64, x []int) {
	var mt [mtN]uint32
	mtSeed(&mt, seed)
	var prefix [64]uint32
	mtFirstOutputs(&mt, prefix[:])
	s := mtStream{seed: seed, prefix: prefix[:]}
	s.shuffle(x)
}
