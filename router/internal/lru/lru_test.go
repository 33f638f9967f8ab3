package lru

import (
	"slices"
	"testing"
)

func order(l *List, links []Link) []int32 {
	var o []int32
	for i := l.Front(); i >= 0; i = Next(links, i) {
		o = append(o, i)
	}
	return o
}

func TestList(t *testing.T) {
	links := make([]Link, 5)
	l := New()
	if l.Front() != -1 || l.Back() != -1 {
		t.Fatal("new list not empty")
	}
	for i := range int32(4) {
		l.PushFront(links, i)
	}
	if got := order(&l, links); !slices.Equal(got, []int32{3, 2, 1, 0}) || l.Back() != 0 {
		t.Fatalf("order = %v back %d, want [3 2 1 0] back 0", got, l.Back())
	}
	l.Touch(links, 1)
	l.Touch(links, 1) // already front
	l.Remove(links, 0)
	l.Remove(links, 3)
	if got := order(&l, links); !slices.Equal(got, []int32{1, 2}) || l.Back() != 2 {
		t.Fatalf("order = %v back %d, want [1 2] back 2", got, l.Back())
	}
	l.Remove(links, 1)
	l.Remove(links, 2)
	if l.Front() != -1 || l.Back() != -1 {
		t.Fatal("emptied list not empty")
	}
}
