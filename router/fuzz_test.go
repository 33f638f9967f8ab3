package router

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// fuzzReader hands out the fuzzer's bytes; past the end it returns zeros.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u64() uint64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = r.byte()
	}
	return binary.LittleEndian.Uint64(buf[:])
}

// fuzzFloat decodes an option value: mostly ordinary values, sometimes
// invalid ones (NaN, ±Inf, negative) that must be rejected cleanly.
func (r *fuzzReader) fuzzFloat(ordinary ...float64) float64 {
	b := r.byte()
	switch b {
	case 250:
		return math.NaN()
	case 251:
		return math.Inf(1)
	case 252:
		return math.Inf(-1)
	case 253:
		return -0.5
	case 254:
		return math.Copysign(0, -1)
	}
	if b < 128 {
		return ordinary[int(b)%len(ordinary)]
	}
	return float64(b-128) / 16 // 0 .. 7.6875
}

func decodeFuzzConfig(r *fuzzReader) Config {
	c := DefaultConfig(pick3(r.byte(), PolicyDefault, PolicyKVCacheAware, PolicyConversation), 1)
	b := r.byte()
	c.DPSize = 1 + int(b%17)
	if b >= 0xF0 {
		c.DPSize = int(b&0x0F) * 5 // includes 0 (invalid) and up to 75
	}
	c.LoadBalanceWeight = r.fuzzFloat(1, 0, 0.1, 10)
	c.MatchRateThreshold = r.fuzzFloat(0.1, 0, 0.5, 1)
	// Multipliers stay below 2^10 so that ceil(multiplier * fair) cannot
	// overflow (see TestHugeFairShareMultiplier for that case).
	c.FairShareMultiplier = r.fuzzFloat(2, 1, 1.5, 4)
	flags := r.byte()
	c.ColdStartWarmup = flags&1 != 0
	c.CapacityAware = flags&2 != 0
	c.NewConvPlacement = pick3(flags>>2, PlacementRoundRobin, PlacementLeastQueued, PlacementLeastTokens)
	if flags>>4 == 15 {
		c.NewConvPlacement = "fuzz"
	}
	c.MaxSessions = int(r.byte() % 6) // 0 (invalid) .. 5
	if c.MaxSessions == 5 {
		c.MaxSessions = DefaultMaxSessions
	}
	// Options beyond the reference (invalid combinations are rejected).
	ext := r.byte()
	c.PrefixSource = [4]PrefixSource{SourceProbe, SourceIndex, SourceProbeIndex, "bogus"}[ext&3]
	c.Warmup = [4]Warmup{"", WarmupOnce, WarmupDemand, WarmupOff}[(ext>>2)&3]
	c.TokensPerBlock = [4]int{DefaultTokensPerBlock, 1, 4, 0}[(ext>>4)&3]
	c.WarmupMinRequests = 1 + int(ext>>6)
	return c
}

func pick3[T any](b byte, x, y, z T) T { return [3]T{x, y, z}[int(b)%3] }

var fuzzConv = []string{"", "", "", "a", "b", "c", "d", "e", "a\x00", "é"}

func decodeFuzzCall(r *fuzzReader, size int) callArgs {
	c := callArgs{maxn: int(r.byte() % 9)} // 0 is invalid
	flags := r.byte()
	nstates := size
	if flags&0x07 == 7 {
		nstates = size + int(r.byte()%3) - 1 // wrong count
	}
	for k := range max(nstates, 0) {
		s := RankState{Rank: k, NumActiveRequests: int(r.byte() % 10), NumActiveTokens: int64(r.byte()) * 97}
		if flags&0x08 != 0 { // capacity reported
			s.KVCapacityTokens = int64(r.byte()) * 64
			s.FreeKVTokens = int64(r.byte()) * 64
			if s.FreeKVTokens > s.KVCapacityTokens && flags&0x10 == 0 {
				s.FreeKVTokens = s.KVCapacityTokens
			}
		}
		if flags&0x20 != 0 && r.byte() == 0xFF {
			s.Rank = k + 1 // out of order
		}
		c.states = append(c.states, s)
	}
	nreq := int(r.byte() % 40)
	for range nreq {
		idb := r.byte()
		var id uint64
		switch {
		case idb >= 0xC0:
			id = r.u64()
		case idb >= 0x80:
			id = math.MaxUint64 - uint64(idb&0x3F)
		default:
			id = uint64(idb % 64) // duplicates happen: an input error
		}
		lb := r.byte()
		q := Request{ID: id, TargetRank: NoTarget}
		n := int(lb % 80)
		if n > 0 {
			fam := int32(r.byte() % 4)
			q.Tokens = make([]int32, n)
			for i := range q.Tokens {
				q.Tokens[i] = fam*100 + int32(i%(1+int(fam)*23))
			}
		}
		switch lb >> 6 {
		case 1:
			q.NumTokens = n + int(r.byte())*31
		case 2:
			q.NumTokens = n - int(r.byte()%3) // may be < len(tokens): an input error
		}
		tb := r.byte()
		if tb&1 != 0 {
			q.TargetRank = int(tb>>1)%(size+3) - 1 // -1 (none) .. size+1 (invalid)
		}
		q.Strict = tb&0x80 != 0
		q.ConversationID = fuzzConv[int(r.byte())%len(fuzzConv)]
		c.reqs = append(c.reqs, q)
	}
	if flags&0x40 != 0 {
		nm := nreq * size
		if flags&0x80 != 0 {
			nm += int(r.byte()%3) - 1 // wrong length
		}
		for range max(nm, 0) {
			b := r.byte()
			m := int32(b) * 3
			if b == 0xFF {
				m = -1 // an input error
			}
			c.matches = append(c.matches, m)
		}
	}
	return c
}

// FuzzRoute decodes a configuration and a few calls from arbitrary bytes and
// routes them. Route must never panic; a rejected config or call must wrap
// ErrInvalidConfig / ErrInvalidInput and change nothing (a twin router that
// only ever sees the accepted calls must agree with it on everything); every
// accepted call must satisfy checkResult, and RouteInto on a reused Result
// must equal Route.
func FuzzRoute(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 3, 1, 1, 1, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 8, 5, 10, 1, 10, 2, 10, 3, 10, 4})
	f.Add([]byte{2, 4, 5, 6, 7, 0x05, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 1, 10, 0, 1, 3, 2, 10, 0, 1, 3})
	f.Add([]byte{1, 0xF4, 200, 200, 200, 3, 4, 8, 0x48})
	addRandomSeeds(f, 7, 24)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{b: data}
		fuzzCalls(t, r, decodeFuzzConfig(r))
	})
}

// addRandomSeeds adds n random inputs of 16..415 bytes from PCG(seed, seed)
// to f's seed corpus.
func addRandomSeeds(f *testing.F, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	for range n {
		b := make([]byte, 16+rng.IntN(400))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}
}

// fuzzCalls builds routers for cfg and routes the calls r decodes, checking
// what FuzzRoute promises.
func fuzzCalls(t *testing.T, r *fuzzReader, cfg Config) {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		if !errors.Is(err, ErrInvalidConfig) || a != nil {
			t.Fatalf("New(%+v) = %v, %v", cfg, a, err)
		}
		return
	}
	// The twin explains itself: receipts must not change a decision.
	tcfg := cfg
	tcfg.Explain = true
	twin := mustNew(t, tcfg)
	c := mustNew(t, cfg)
	reused := new(Result)
	convIDs := fuzzConv[3:]
	ncalls := 1 + int(r.byte()%4)
	for call := range ncalls {
		args := decodeFuzzCall(r, cfg.DPSize)
		before := cloneResult(reused)
		res, err := a.Route(args.states, args.reqs, args.maxn, args.matches)
		errC := c.RouteInto(reused, args.states, args.reqs, args.maxn, args.matches)
		if (err == nil) != (errC == nil) {
			t.Fatalf("call %d: Route error %v, RouteInto error %v", call, err, errC)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidInput) || res != nil {
				t.Fatalf("call %d: Route = %v, %v; want nil and ErrInvalidInput", call, res, err)
			}
			if !equalResults(reused, before) {
				t.Fatalf("call %d: RouteInto changed its result on error %v", call, err)
			}
		} else {
			if err := checkResult(cfg, args.states, args.reqs, args.maxn, res); err != nil {
				t.Fatalf("call %d, config %+v: %v\nargs %+v", call, cfg, err, args)
			}
			tres := mustRoute(t, twin, args.states, args.reqs, args.maxn, args.matches)
			if !equalResults(res, tres) {
				t.Fatalf("call %d: twin (explaining) result %+v, want %+v", call, tres, res)
			}
			if err := checkReceipts(cfg, args.states, args.reqs, tres, twin.Receipts()); err != nil {
				t.Fatalf("call %d: %v", call, err)
			}
			if !equalResults(res, reused) {
				t.Fatalf("call %d: RouteInto %+v, Route %+v", call, reused, res)
			}
		}
		if d := diffState(a, twin, convIDs); d != "" {
			t.Fatalf("call %d (error %v): state differs from the twin: %s", call, err, d)
		}
		if d := diffState(a, c, convIDs); d != "" {
			t.Fatalf("call %d: RouteInto router state differs: %s", call, d)
		}
	}
}

// FuzzRouteTTFT is FuzzRoute for the TTFT score: a KV-aware configuration
// with ScoreTTFT, its reuse semantics, warmup, drain and prefix source
// decoded from the bytes (or the recommended preset), then the same calls and
// checks. Its own target keeps FuzzRoute's corpus meaning what it meant.
func FuzzRouteTTFT(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 3, 1, 2, 3, 1, 1, 1, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 8, 5, 10, 1, 10, 2, 10, 3, 10, 4})
	f.Add([]byte{4, 8, 0, 1, 0, 2, 4, 5, 6, 7, 0x05, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 1, 10, 0, 1, 3, 2, 10, 0, 1, 3})
	addRandomSeeds(f, 15, 16)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{b: data}
		fuzzCalls(t, r, decodeFuzzTTFTConfig(r))
	})
}

func decodeFuzzTTFTConfig(r *fuzzReader) Config {
	b := r.byte()
	size := 1 + int(r.byte()%17)
	c := DefaultConfig(PolicyKVCacheAware, size)
	if b%5 == 4 {
		if err := ApplyPreset(&c, PresetRecommended); err != nil {
			panic(err)
		}
		return c
	}
	c.Score = ScoreTTFT
	c.PrefixSource = [2]PrefixSource{SourceIndex, SourceProbeIndex}[b%2]
	c.EngineReuse = pick3(r.byte(), "", ReuseAfterIteration, ReuseOnSchedule)
	c.Warmup = [5]Warmup{"", WarmupOff, WarmupOnce, WarmupQuiet, WarmupDemand}[int(r.byte())%5]
	c.TTFTDrainTokens = [4]int{0, 1, 64, DefaultTTFTDrainTokens}[int(r.byte())%4]
	c.WarmupWindow = 1 + int(r.byte()%8)
	c.FairShareMultiplier = r.fuzzFloat(2, 1, 4)
	return c
}
