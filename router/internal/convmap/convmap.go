// Package convmap is the conversation policy's map from conversation id to
// rank: bounded to a number of bindings, least recently used evicted first,
// and deterministic (recency is the only order it keeps; it never iterates
// a Go map).
package convmap

import (
	"strings"

	"github.com/adprouter/adprouter/router/internal/lru"
)

// Map maps conversation ids to ranks, bounded to limit entries with least
// recently used eviction. The zero Map is not usable: call New.
type Map struct {
	limit   int
	index   map[string]int32 // id -> slot
	entries []convEntry      // slots
	links   []lru.Link       // recency links, parallel to entries
	order   lru.List
	free    []int32
}

type convEntry struct {
	key  string
	rank int
}

// New returns an empty Map holding at most limit (>= 1) bindings.
func New(limit int) Map {
	return Map{limit: limit, index: make(map[string]int32), order: lru.New()}
}

// Len returns the number of bindings.
func (l *Map) Len() int { return len(l.index) }

// Get returns the rank bound to key, without touching its recency.
func (l *Map) Get(key string) (int, bool) {
	e, ok := l.index[key]
	if !ok {
		return 0, false
	}
	return l.entries[e].rank, true
}

// Touch makes key the most recently used binding.
func (l *Map) Touch(key string) {
	if e, ok := l.index[key]; ok {
		l.order.Touch(l.links, e)
	}
}

// Bind sets key -> rank as the most recent binding and evicts the least
// recently used ones beyond the limit.
func (l *Map) Bind(key string, rank int) {
	if e, ok := l.index[key]; ok {
		l.entries[e].rank = rank
		l.order.Touch(l.links, e)
		return
	}
	var e int32
	if n := len(l.free); n > 0 {
		e = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		e = int32(len(l.entries))
		l.entries = append(l.entries, convEntry{})
		l.links = append(l.links, lru.Link{})
	}
	// The key may alias caller memory (the C front end passes ids in
	// place); the map keeps its own copy.
	key = strings.Clone(key)
	l.entries[e] = convEntry{key: key, rank: rank}
	l.index[key] = e
	l.order.PushFront(l.links, e)
	for len(l.index) > l.limit {
		old := l.order.Back()
		l.order.Remove(l.links, old)
		delete(l.index, l.entries[old].key)
		l.entries[old] = convEntry{}
		l.free = append(l.free, old)
	}
}

// Each calls f for every binding from most to least recently used.
func (l *Map) Each(f func(key string, rank int)) {
	for e := l.order.Front(); e >= 0; e = lru.Next(l.links, e) {
		f(l.entries[e].key, l.entries[e].rank)
	}
}

// CountRecent adds one to counts[rank] for each of the n most recently used
// bindings (fewer when the map holds fewer); every bound rank must index
// counts.
func (l *Map) CountRecent(n int, counts []int) {
	for e := l.order.Front(); e >= 0 && n > 0; e = lru.Next(l.links, e) {
		counts[l.entries[e].rank]++
		n--
	}
}
