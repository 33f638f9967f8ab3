package router

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestIDSetDuplicate(t *testing.T) {
	reqs := func(ids ...uint64) []Request {
		q := make([]Request, len(ids))
		for i, id := range ids {
			q[i] = Request{ID: id, TargetRank: NoTarget}
		}
		return q
	}
	// Ids that collide under Fibonacci hashing (multiples of 2^60) probe.
	for _, tc := range []struct {
		name string
		reqs []Request
		dup  uint64
		ok   bool
	}{
		{"none", nil, 0, false},
		{"one", reqs(5), 0, false},
		{"distinct", reqs(0, 1, math.MaxUint64, 1<<63), 0, false},
		{"zero twice", reqs(7, 0, 3, 0), 0, true},
		{"max twice", reqs(math.MaxUint64, 1, math.MaxUint64), math.MaxUint64, true},
		{"first in request order", reqs(9, 4, 4, 9), 4, true},
		{"colliding distinct", reqs(1<<60, 2<<60, 3<<60, 4<<60, 0), 0, false},
		{"colliding twice", reqs(1<<60, 2<<60, 3<<60, 2<<60), 2 << 60, true},
	} {
		var s idSet
		id, dup := s.duplicate(tc.reqs)
		if dup != tc.ok || id != tc.dup {
			t.Errorf("%s: duplicate() = %d, %v; want %d, %v", tc.name, id, dup, tc.dup, tc.ok)
		}
	}
	// Reused across batches of random ids, against a map.
	var s idSet
	rng := rand.New(rand.NewPCG(2, 3))
	for iter := range 500 {
		n := rng.IntN(300)
		q := make([]Request, n)
		seen := map[uint64]bool{}
		var want uint64
		wantDup := false
		for i := range q {
			q[i].ID = rng.Uint64N(uint64(4*n + 1))
			if seen[q[i].ID] && !wantDup {
				want, wantDup = q[i].ID, true
			}
			seen[q[i].ID] = true
		}
		if id, dup := s.duplicate(q); dup != wantDup || id != want {
			t.Fatalf("iteration %d: duplicate() = %d, %v; want %d, %v", iter, id, dup, want, wantDup)
		}
	}
}
