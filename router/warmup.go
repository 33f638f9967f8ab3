package router

// warming reports whether the cold-start warmup may send this batch's
// requests to ranks not warmed yet: always under WarmupOnce (the
// reference), only while the engine is quiet under WarmupQuiet — at most
// one request per rank, active and new together — so that warmup happens
// before a spike and never adds a cold prefill to a loaded engine.
func (r *Router) warming(b *batch) bool {
	if r.cfg.Warmup != WarmupQuiet {
		return true
	}
	for i := range b.states {
		if b.states[i].NumActiveRequests > 0 {
			return false
		}
	}
	return true
}
