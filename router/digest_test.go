package router

import "testing"

func TestStateDigest(t *testing.T) {
	cfg := DefaultConfig(PolicyConversation, 4)
	a, b := mustNew(t, cfg), mustNew(t, cfg)
	if a.StateDigest() != b.StateDigest() {
		t.Fatal("fresh twins have different digests")
	}
	batch := []Request{conv(1, "x"), conv(2, "y")}
	mustRoute(t, a, idle(4), batch, 8, nil)
	if a.StateDigest() == b.StateDigest() {
		t.Fatal("digest did not change after bindings were made")
	}
	mustRoute(t, b, idle(4), batch, 8, nil)
	if a.StateDigest() != b.StateDigest() {
		t.Fatal("twins fed the same calls have different digests")
	}
	// Same bindings, different recency order: the LRU would evict
	// differently, so the digest must differ.
	c, d := mustNew(t, cfg), mustNew(t, cfg)
	mustRoute(t, c, idle(4), []Request{conv(1, "x"), conv(2, "y")}, 8, nil)
	mustRoute(t, d, idle(4), []Request{conv(1, "x"), conv(2, "y")}, 8, nil)
	mustRoute(t, d, idle(4), []Request{conv(3, "x")}, 8, nil) // touches x
	mustRoute(t, c, idle(4), []Request{conv(3, "y")}, 8, nil) // touches y
	if c.StateDigest() == d.StateDigest() {
		t.Fatal("different recency orders share a digest")
	}

	w := DefaultConfig(PolicyKVCacheAware, 4)
	w.ColdStartWarmup = true
	e, f := mustNew(t, w), mustNew(t, w)
	mustRoute(t, e, idle(4), []Request{req(1, 10)}, 8, nil)
	if e.StateDigest() == f.StateDigest() {
		t.Fatal("digest ignores the pending warmup set")
	}
	g := w
	g.LoadBalanceWeight = 2
	if mustNew(t, g).StateDigest() == f.StateDigest() {
		t.Fatal("digest ignores the configuration")
	}
}
