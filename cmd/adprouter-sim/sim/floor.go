package sim

import (
	"math"
	"slices"
)

// Floor is one request's least possible time to first token.
type Floor struct {
	// ID is the request (Turn.ID); TTFT is in ns.
	ID   uint64
	TTFT int64
}

// TTFTFloor returns, for every request of the workload in session and turn
// order, a time to first token that no routing policy can beat on the
// engine: the time to compute the request's prompt alone on an idle rank,
// with every prompt block reused that any request able to run before it
// could have cached.
//
// It is a lower bound, not an estimate. A request's TTFT is at least the
// lock-step iterations that compute its uncached tokens, each IterBaseMs
// plus PrefillUsPerToken per token, at most MaxNumTokens tokens an
// iteration; other work on the ranks only adds to that, and waiting for
// the iteration in flight when it arrives is not counted. Its uncached
// tokens are at least its prompt less its longest prefix of whole blocks
// (the prompt minus its last token, as the engine probes) found in the
// prompt or answer of any other request that could start before it: every
// request of another session, the earlier turns of its own, and the later
// turns of its own that arrive without waiting for it (in-flight
// follow-ups). Because every request's TTFT is at least its floor, every
// quantile of the TTFTs is at least the same quantile of the floors: the
// p99 of the floors (FloorP99) bounds the p99 any policy can reach, and a
// best reference within 1/GoalWin of it leaves no room for a policy to be
// GoalWin times faster on that case.
//
// Requests larger than the engine's largest KV pool are left out (no rank
// can run them; every policy rejects them). FloorP99 bounds the p99 of a
// run that rejects no other request.
func TTFTFloor(wl *Workload, eng EngineConfig) []Floor {
	fl, _ := floors(wl, eng)
	return fl
}

// floors returns TTFTFloor and, for every prompt family no answer can
// supply, the least time one of its requests must take (see FloorP99).
func floors(wl *Workload, eng EngineConfig) ([]Floor, []int64) {
	tpb := eng.TokensPerBlock
	largest, smallest := 0, math.MaxInt
	for _, c := range eng.Capacities() {
		largest, smallest = max(largest, c), min(smallest, c)
	}
	// The chained block hashes of every request's prompt and answer; a
	// hash identifies its whole prefix, so a shared hash is a shared prefix.
	type turnHashes struct {
		prompt, all []uint64
		tokens      int // prompt tokens
	}
	seqs := make([][]turnHashes, len(wl.Sessions))
	// owner maps a block hash to 1 + the one session holding it, or to -1
	// when several do; answered, the first-block hashes an answer holds.
	owner := map[uint64]int{}
	answered := map[uint64]bool{}
	var seq []int32
	for i := range wl.Sessions {
		s := &wl.Sessions[i]
		seqs[i] = make([]turnHashes, len(s.Turns))
		for k := range s.Turns {
			p := wl.Prompt(s, k)
			ph := AppendBlockHashes(nil, p, tpb)
			seq = wl.OutputTokens(append(seq[:0], p...), s.Turns[k].ID, s.Turns[k].Output)
			all := AppendBlockHashes(ph[:len(ph):len(ph)], seq, tpb)
			seqs[i][k] = turnHashes{prompt: ph, all: all, tokens: len(p)}
			if len(ph) == 0 && len(all) > 0 {
				answered[all[0]] = true
			}
			for _, h := range all {
				if o := owner[h]; o == 0 {
					owner[h] = i + 1
				} else if o != i+1 {
					owner[h] = -1
				}
			}
		}
	}
	floor := make([]Floor, 0, wl.NumRequests())
	// family maps a first-block hash to the least time a request opening
	// with it takes computing its whole prompt; -1 when a request of the
	// family may be rejected.
	family := map[uint64]int64{}
	var order []uint64
	for i := range wl.Sessions {
		s := &wl.Sessions[i]
		for k := range s.Turns {
			t := &seqs[i][k]
			if len(t.prompt) == 0 || answered[t.prompt[0]] {
				continue
			}
			h, ns := t.prompt[0], computeNs(eng, t.tokens)
			if (t.tokens+s.Turns[k].Output+tpb-1)/tpb > smallest {
				ns = -1
			}
			if m, ok := family[h]; !ok {
				order = append(order, h)
				family[h] = ns
			} else if m >= 0 && (ns < 0 || ns < m) {
				family[h] = ns
			}
		}
	}
	var first []int64
	for _, h := range order {
		if m := family[h]; m >= 0 {
			first = append(first, m)
		}
	}
	for i := range wl.Sessions {
		s := &wl.Sessions[i]
		for k := range s.Turns {
			t := &seqs[i][k]
			plen := t.tokens
			if (plen+s.Turns[k].Output+tpb-1)/tpb > largest {
				continue
			}
			probe := max(plen-1, 0) / tpb
			hit := 0
			for hit < probe {
				if owner[t.prompt[hit]] == i+1 {
					break // held by this session alone
				}
				hit++
			}
			// The same session: earlier turns, and later ones that arrive
			// without waiting for this one.
			for j := range s.Turns {
				if j == k || j > k && !inFlightFrom(s, k, j) {
					continue
				}
				hit = max(hit, commonPrefix(t.prompt[:probe], seqs[i][j].all))
			}
			floor = append(floor, Floor{ID: s.Turns[k].ID, TTFT: computeNs(eng, plen-hit*tpb)})
		}
	}
	return floor, first
}

// FloorP99 returns, in ms, a TTFT p99 no policy reaches below on the
// workload: the larger of two bounds.
//
//   - The nearest-rank 99th percentile of TTFTFloor.
//   - Requests whose prompts open with the same whole block form a family.
//     Unless an answer holds that block, the first request to compute it
//     finds nothing cached: one request of every family computes its whole
//     prompt, and so takes at least the least time any of them would
//     computing its own alone. Those are distinct requests, so the p99 (the
//     k-th slowest of n requests) is at least the k-th largest of these
//     family minima. It counts where TTFTFloor cannot: a prompt that many
//     requests share is computed at least once.
func FloorP99(wl *Workload, eng EngineConfig) float64 {
	fl, first := floors(wl, eng)
	ns := make([]int64, len(fl))
	for i, f := range fl {
		ns[i] = f.TTFT
	}
	if len(ns) == 0 {
		return 0
	}
	slices.Sort(ns)
	p99 := quantile(ns, 0.99)
	// The p99 is the k-th slowest request.
	if k := len(ns) - int(math.Ceil(0.99*float64(len(ns)))) + 1; k <= len(first) {
		slices.Sort(first)
		p99 = max(p99, first[len(first)-k])
	}
	return round(float64(p99)/1e6, 3)
}

// inFlightFrom reports whether turn j > k of s arrives without waiting for
// turn k to finish: every turn after k up to j is an in-flight follow-up.
func inFlightFrom(s *Session, k, j int) bool {
	for m := k + 1; m <= j; m++ {
		if !s.Turns[m].InFlight {
			return false
		}
	}
	return true
}

// commonPrefix returns the length of the common prefix of a and b.
func commonPrefix[T comparable](a, b []T) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// computeNs is the least time the engine takes to compute u prompt tokens
// of one request: ceil(u / MaxNumTokens) iterations (at least one) of
// IterBaseMs each, plus PrefillUsPerToken per token.
func computeNs(eng EngineConfig, u int) int64 {
	iters := max((u+eng.MaxNumTokens-1)/eng.MaxNumTokens, 1)
	return int64(math.Floor(float64(iters)*eng.IterBaseMs*1e6 + eng.PrefillUsPerToken*1e3*float64(u)))
}
