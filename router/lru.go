package router

import "strings"

// convLRU maps conversation ids to ranks, bounded to limit entries with least
// recently used eviction. Recency is a doubly linked list threaded through a
// slice, so eviction order depends only on the sequence of operations — never
// on map iteration order.
type convLRU struct {
	limit   int
	index   map[string]int32
	entries []convEntry
	free    []int32
	head    int32 // most recently used, or -1
	tail    int32 // least recently used, or -1
}

type convEntry struct {
	key        string
	rank       int
	prev, next int32
}

func (l *convLRU) init(limit int) {
	l.limit = limit
	l.index = make(map[string]int32)
	l.head, l.tail = -1, -1
}

// Len returns the number of bindings.
func (l *convLRU) Len() int { return len(l.index) }

// get returns the rank bound to key, without touching its recency.
func (l *convLRU) get(key string) (int, bool) {
	e, ok := l.index[key]
	if !ok {
		return 0, false
	}
	return l.entries[e].rank, true
}

// touch makes key the most recently used binding.
func (l *convLRU) touch(key string) {
	if e, ok := l.index[key]; ok {
		l.unlink(e)
		l.pushFront(e)
	}
}

// bind sets key -> rank as the most recent binding and evicts the least
// recently used ones beyond the limit.
func (l *convLRU) bind(key string, rank int) {
	if e, ok := l.index[key]; ok {
		l.entries[e].rank = rank
		l.unlink(e)
		l.pushFront(e)
		return
	}
	var e int32
	if n := len(l.free); n > 0 {
		e = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		e = int32(len(l.entries))
		l.entries = append(l.entries, convEntry{})
	}
	// The key may alias caller memory (the C front end passes ids in
	// place); the map keeps its own copy.
	key = strings.Clone(key)
	l.entries[e] = convEntry{key: key, rank: rank}
	l.index[key] = e
	l.pushFront(e)
	for len(l.index) > l.limit {
		old := l.tail
		l.unlink(old)
		delete(l.index, l.entries[old].key)
		l.entries[old] = convEntry{}
		l.free = append(l.free, old)
	}
}

// each calls f for every binding from most to least recently used.
func (l *convLRU) each(f func(key string, rank int)) {
	for e := l.head; e >= 0; e = l.entries[e].next {
		f(l.entries[e].key, l.entries[e].rank)
	}
}

func (l *convLRU) unlink(e int32) {
	en := &l.entries[e]
	if en.prev >= 0 {
		l.entries[en.prev].next = en.next
	} else {
		l.head = en.next
	}
	if en.next >= 0 {
		l.entries[en.next].prev = en.prev
	} else {
		l.tail = en.prev
	}
	en.prev, en.next = -1, -1
}

func (l *convLRU) pushFront(e int32) {
	en := &l.entries[e]
	en.prev, en.next = -1, l.head
	if l.head >= 0 {
		l.entries[l.head].prev = e
	}
	l.head = e
	if l.tail < 0 {
		l.tail = e
	}
}
