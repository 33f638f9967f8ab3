package convmap

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"
)

func order(m *Map) []string {
	var keys []string
	m.Each(func(key string, rank int) { keys = append(keys, fmt.Sprint(key, "=", rank)) })
	return keys
}

// Bindings are kept most recent first, Touch and rebinding refresh them,
// and the least recently used go first beyond the limit.
func TestMap(t *testing.T) {
	m := New(3)
	m.Bind("a", 0)
	m.Bind("b", 1)
	m.Bind("c", 2)
	m.Touch("a")
	m.Bind("d", 3) // evicts b, the least recent
	if got, want := order(&m), []string{"d=3", "a=0", "c=2"}; !slices.Equal(got, want) {
		t.Errorf("after touch and overflow: %v, want %v", got, want)
	}
	if _, ok := m.Get("b"); ok {
		t.Error("b is still bound after eviction")
	}
	m.Bind("c", 1) // rebinding moves and refreshes
	if r, ok := m.Get("c"); !ok || r != 1 || order(&m)[0] != "c=1" {
		t.Errorf("rebinding c: rank %d ok %v order %v", r, ok, order(&m))
	}
	m.Touch("zzz") // unknown: nothing happens
	if m.Len() != 3 {
		t.Errorf("Len = %d, want 3", m.Len())
	}
	// Keys are copied: a key that aliases the caller's memory (as the C
	// front end passes them) may change afterwards.
	buf := []byte("key1")
	m.Bind(unsafe.String(&buf[0], len(buf)), 2)
	buf[0] = 'X'
	if _, ok := m.Get("key1"); !ok {
		t.Error("a bound key changed with the caller's buffer")
	}
}

// CountRecent counts the ranks of the n most recently used bindings only.
func TestCountRecent(t *testing.T) {
	m := New(8)
	for _, b := range []struct {
		key  string
		rank int
	}{{"a", 0}, {"b", 0}, {"c", 1}, {"d", 2}} {
		m.Bind(b.key, b.rank)
	}
	m.Touch("a") // recency, most recent first: a, d, c, b
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, []int{0, 0, 0}},
		{1, []int{1, 0, 0}},
		{3, []int{1, 1, 1}},
		{4, []int{2, 1, 1}},
		{10, []int{2, 1, 1}},
	} {
		got := make([]int, 3)
		m.CountRecent(tc.n, got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("CountRecent(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}
