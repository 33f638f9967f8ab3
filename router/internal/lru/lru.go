// Package lru is the recency order shared by the router's bounded maps: a
// doubly linked list threaded through slot numbers of the caller's own slice,
// so that eviction order depends only on the sequence of operations, never on
// map iteration, and nodes cost no allocation.
package lru

// Link is one slot's place in a List. Keep a []Link parallel to the slots.
type Link struct{ Prev, Next int32 }

// List orders slots from most (Front) to least (Back) recently used. The
// zero List is not ready: use New. Several Lists may share one []Link as long
// as each slot is in at most one of them.
type List struct{ head, tail int32 }

// New returns an empty List.
func New() List { return List{head: -1, tail: -1} }

// Front returns the most recently used slot, or -1.
func (l *List) Front() int32 { return l.head }

// Back returns the least recently used slot, or -1.
func (l *List) Back() int32 { return l.tail }

// Next returns the slot after i (less recently used), or -1.
func Next(links []Link, i int32) int32 { return links[i].Next }

// PushFront makes slot i, which must not be in the list, the most recent.
func (l *List) PushFront(links []Link, i int32) {
	links[i] = Link{Prev: -1, Next: l.head}
	if l.head >= 0 {
		links[l.head].Prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}

// Remove takes slot i out of the list.
func (l *List) Remove(links []Link, i int32) {
	ln := links[i]
	if ln.Prev >= 0 {
		links[ln.Prev].Next = ln.Next
	} else {
		l.head = ln.Next
	}
	if ln.Next >= 0 {
		links[ln.Next].Prev = ln.Prev
	} else {
		l.tail = ln.Prev
	}
	links[i] = Link{Prev: -1, Next: -1}
}

// Touch makes slot i, which must be in the list, the most recent.
func (l *List) Touch(links []Link, i int32) {
	if l.head == i {
		return
	}
	l.Remove(links, i)
	l.PushFront(links, i)
}
