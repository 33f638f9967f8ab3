package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// The buffer rule of adprouter.h ("Buffers" under Conventions), in one
// place: an export that copies a variable amount of data into caller memory
// takes each buffer's capacity (items; bytes for text) and stores the total
// its result needs (text: with the NUL) through that buffer's total pointer
// on every call that gets past its argument checks. When every buffer holds
// its total, the export fills them all; otherwise it writes none of them and
// returns ADPR_ERR_SHORT_BUFFER. A NULL buffer with capacity 0 asks for the
// total.

// An outBuffer is one caller buffer and where its total goes.
type outBuffer struct {
	name      string // the buffer parameter, for messages
	ptr       unsafe.Pointer
	capacity  C.int64_t
	totalName string
	total     *C.int64_t
}

// checkBuffers reports the first malformed buffer argument: a NULL total,
// a negative capacity, or a NULL buffer with a capacity.
func checkBuffers(bufs ...outBuffer) error {
	for _, b := range bufs {
		switch {
		case b.total == nil:
			return argError("%s is NULL, want a pointer for the total", b.totalName)
		case b.capacity < 0:
			return argError("%s capacity = %d, want >= 0", b.name, int64(b.capacity))
		case b.capacity > 0 && b.ptr == nil:
			return argError("%s is NULL with capacity %d, want a buffer (or capacity 0 to ask for the total)",
				b.name, int64(b.capacity))
		}
	}
	return nil
}

// settle stores each buffer's total (totals[i] for bufs[i]) and reports a
// shortError naming every buffer smaller than its total.
func settle(bufs []outBuffer, totals ...int64) error {
	var short string
	for i, b := range bufs {
		*b.total = C.int64_t(totals[i])
		if int64(b.capacity) < totals[i] {
			if short != "" {
				short += ", "
			}
			short += fmt.Sprintf("%s capacity %d < %d", b.name, int64(b.capacity), totals[i])
		}
	}
	if short != "" {
		return shortError("%s (the totals were stored: call again with buffers that size)", short)
	}
	return nil
}

// textBuffer is the outBuffer of a char *out with capacity and total.
func textBuffer(name string, out *C.char, capacity C.int64_t, total *C.int64_t) outBuffer {
	return outBuffer{name: name, ptr: unsafe.Pointer(out), capacity: capacity, totalName: "total", total: total}
}

// putText writes text and a NUL into b under the rule.
func putText(b outBuffer, text []byte) error {
	if err := settle([]outBuffer{b}, int64(len(text))+1); err != nil {
		return err
	}
	dst := unsafe.Slice((*byte)(b.ptr), len(text)+1)
	copy(dst, text)
	dst[len(text)] = 0
	return nil
}
