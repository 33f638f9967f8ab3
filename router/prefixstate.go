package router

import (
	"math"
	"slices"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// prefixState is the KV-aware policy's router-side knowledge of prompt
// prefixes: the prefix index (what each rank is expected to cache, learnt
// from placements) and, for demand warmup and the predicted-TTFT score, the
// demand window (which prompt families recent traffic used). It exists only
// when Config.indexed().
type prefixState struct {
	idx *prefix.Index

	// The demand window: the families (first-block hashes) of the last
	// len(window) routed requests, oldest at wpos once full, and their counts.
	window []uint64
	hasFam []bool
	wpos   int
	wfill  int
	counts map[uint64]int

	// Per-decision scratch: each request's block hashes.
	hashOff []int32
	hashLen []int32
	hashes  []uint64
	blocks  []int
}

func newPrefixState(cfg *Config) *prefixState {
	p := &prefixState{idx: prefix.NewIndex(cfg.DPSize, cfg.IndexMaxBytes/prefix.EntryBytes)}
	if cfg.Warmup == WarmupDemand || cfg.Score == ScoreTTFT {
		p.window = make([]uint64, cfg.WarmupWindow)
		p.hasFam = make([]bool, cfg.WarmupWindow)
		p.counts = make(map[uint64]int)
	}
	return p
}

// begin bounds each rank's index by its KV capacity and resets the
// per-decision scratch. A changed bound changes the state: it is folded into
// the digest d.
func (p *prefixState) begin(cfg *Config, b *batch, d *uint64) {
	for k := range b.states {
		limit := prefix.DefaultRankBlocks
		if c := b.states[k].KVCapacityTokens; c > 0 {
			limit = int(min(c/int64(cfg.TokensPerBlock), 1<<30))
		} else if cfg.IndexCapacityBlocks > 0 {
			limit = cfg.IndexCapacityBlocks
		}
		if limit != p.idx.Limit(k) {
			p.idx.SetLimit(k, limit)
			*d = fold(*d, tagLimit, uint64(k), uint64(limit))
		}
	}
	n := len(b.reqs)
	p.hashOff = slices.Grow(p.hashOff[:0], n)[:n]
	p.hashLen = slices.Grow(p.hashLen[:0], n)[:n]
	for i := range p.hashOff {
		p.hashOff[i] = -1
	}
	p.hashes = p.hashes[:0]
}

// hashesOf returns the block hashes of request i's prompt without its last
// token (what an engine caches), computed once per decision.
func (p *prefixState) hashesOf(cfg *Config, b *batch, i int) []uint64 {
	if p.hashOff[i] < 0 {
		q := &b.reqs[i]
		toks := q.Tokens[:min(len(q.Tokens), max(q.Len()-1, 0))]
		start := len(p.hashes)
		p.hashes = prefix.AppendHashes(p.hashes, toks, cfg.TokensPerBlock, q.LoRAID, q.CacheSalt)
		p.hashOff[i], p.hashLen[i] = int32(start), int32(len(p.hashes)-start)
	}
	return p.hashes[p.hashOff[i] : p.hashOff[i]+p.hashLen[i]]
}

// matchRow writes into row[k] the index's match on rank k for request i, in
// tokens, and returns the longest.
func (p *prefixState) matchRow(cfg *Config, b *batch, i int, row []int) int {
	hs := p.hashesOf(cfg, b, i)
	p.blocks = slices.Grow(p.blocks[:0], len(row))[:len(row)]
	p.idx.Match(hs, p.blocks)
	longest := 0
	for k, nb := range p.blocks {
		row[k] = nb * cfg.TokensPerBlock
		longest = max(longest, row[k])
	}
	return longest
}

// placed records that request i now runs on rank: its blocks are expected
// there, and (with a demand window) its family counts as recent traffic. The change
// is folded into the digest d: the rank, the chain's length and its last
// hash, which chains every block before it.
func (p *prefixState) placed(cfg *Config, b *batch, i, rank int, d *uint64) {
	hs := p.hashesOf(cfg, b, i)
	var last uint64
	if len(hs) > 0 {
		last = hs[len(hs)-1]
	}
	*d = fold(*d, tagPlace, uint64(rank)<<32|uint64(len(hs)), last)
	p.idx.Insert(rank, hs)
	if p.window == nil {
		return
	}
	if p.wfill == len(p.window) {
		if p.hasFam[p.wpos] {
			old := p.window[p.wpos]
			if p.counts[old]--; p.counts[old] == 0 {
				delete(p.counts, old)
			}
		}
	} else {
		p.wfill++
	}
	p.hasFam[p.wpos] = len(hs) > 0
	if len(hs) > 0 {
		p.window[p.wpos] = hs[0]
		p.counts[hs[0]]++
	} else {
		p.window[p.wpos] = 0
	}
	p.wpos = (p.wpos + 1) % len(p.window)
}

// replicaTarget returns, for request i's prompt family, how many ranks
// should hold it and how many do; ok is false for requests without a family
// (shorter than a block) or of families seen fewer than WarmupMinRequests
// times in the window.
func (p *prefixState) replicaTarget(cfg *Config, b *batch, i int) (fam uint64, want, have int, ok bool) {
	fam, c, ok := p.demand(cfg, b, i)
	if !ok {
		return fam, 0, 0, false
	}
	_, want = p.target(cfg, c)
	return fam, want, p.idx.Replicas(fam), true
}

// family returns request i's prompt family, the hash of its first block;
// ok is false for a prompt shorter than a block, which has none.
func (p *prefixState) family(cfg *Config, b *batch, i int) (fam uint64, ok bool) {
	if hs := p.hashesOf(cfg, b, i); len(hs) > 0 {
		return hs[0], true
	}
	return 0, false
}

// demand returns request i's prompt family and how many requests of the
// demand window belong to it; ok is false for requests without a family
// (shorter than a block) and families seen fewer than WarmupMinRequests
// times in the window: one-off prompts are no demand.
func (p *prefixState) demand(cfg *Config, b *batch, i int) (fam uint64, count int, ok bool) {
	fam, ok = p.family(cfg, b, i)
	if !ok {
		return 0, 0, false
	}
	count = p.counts[fam]
	return fam, count, count >= cfg.WarmupMinRequests
}

// target returns a family's share of the demand window, given its count
// there, and how many ranks demand warmup wants to hold it:
// ceil(share × dp_size × WarmupFactor), at least 1 and at most dp_size.
func (p *prefixState) target(cfg *Config, count int) (share float64, ranks int) {
	share = float64(count) / float64(p.wfill)
	return share, min(max(int(math.Ceil(share*float64(cfg.DPSize)*cfg.WarmupFactor)), 1), cfg.DPSize)
}
