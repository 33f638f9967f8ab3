package router

import (
	"testing"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

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

// hashString reads each 8-byte word of the id little-endian and a short
// last word zero-extended, for every length: the digest of a conversation
// binding must not change with how the words are loaded.
func TestHashStringWords(t *testing.T) {
	byBytes := func(s string) uint64 {
		h := prefix.Mix(uint64(len(s)) ^ 0x2545f4914f6cdd1d)
		for len(s) > 0 {
			var w uint64
			n := min(len(s), 8)
			for i := range n {
				w |= uint64(s[i]) << (8 * i)
			}
			h = prefix.Mix(h ^ w)
			s = s[n:]
		}
		return h
	}
	buf := make([]byte, 40)
	for i := range buf {
		buf[i] = byte(0x80 ^ i*37)
	}
	for n := range len(buf) + 1 {
		s := string(buf[:n])
		if got, want := hashString(s), byBytes(s); got != want {
			t.Errorf("hashString(%d bytes) = %#x, want %#x", n, got, want)
		}
	}
	if got, want := hashString("chat-0123456789"), uint64(0x4833bba92286e0d0); got != want {
		t.Errorf("hashString(%q) = %#x, want %#x", "chat-0123456789", got, want)
	}
}
