package prefix

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// vmFlags returns the VmFlags of the mapping holding address a, from
// /proc/self/smaps.
func vmFlags(t *testing.T, a uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		// A mapping's header line is "lo-hi perms ..."; its fields are
		// "Name: value" lines.
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			in = lo <= a && a < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Fields(strings.TrimPrefix(line, "VmFlags:"))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x", a)
	return nil
}

// The index's large arrays are advised for transparent huge pages (smaps
// shows the flag "hg" on their whole huge pages), so that their growth
// faults 2 MiB at a time.
func TestIndexAdvisesHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("this kernel has no transparent huge pages")
	}
	x := NewIndex(4, 1<<20)
	for r := range 4 {
		x.SetLimit(r, 1<<20)
	}
	for i := 0; i < 100_000 && (len(x.table)*8 < 4*hugePage || cap(x.nodes)*int(unsafe.Sizeof(node{})) < 4*hugePage); i++ {
		x.Insert(i%4, AppendHashes(nil, seq(i*10_000, 32*64), 32, 0, 0))
	}
	if len(x.table)*8 < 4*hugePage || cap(x.nodes)*int(unsafe.Sizeof(node{})) < 4*hugePage {
		t.Fatalf("the arrays did not grow: %d buckets, %d nodes", len(x.table), cap(x.nodes))
	}
	for _, a := range []struct {
		name string
		p    unsafe.Pointer
	}{
		{"hash table", unsafe.Pointer(unsafe.SliceData(x.table))},
		{"nodes", unsafe.Pointer(unsafe.SliceData(x.nodes))},
	} {
		// The first whole huge page inside the array.
		addr := (uintptr(a.p) + hugePage - 1) &^ (hugePage - 1)
		if flags := vmFlags(t, addr); !slices.Contains(flags, "hg") {
			t.Errorf("%s at %#x: VmFlags %v, want hg (MADV_HUGEPAGE)", a.name, addr, flags)
		}
	}
}
