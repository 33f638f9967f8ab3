//go:build adpr_faultinject

// The fault-injection build (go build -tags adpr_faultinject, as
// ADPROUTER_BUILD_TAGS=adpr_faultinject ./build.sh build does for the tests) adds
// one test-only export, adpr_test_inject_panic, that makes a named fault
// point panic. It proves that every export recovers panics; the release
// build has neither the export nor the fault points.

package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"sync"
)

var inject struct {
	sync.Mutex
	point string
}

// faultPoint panics when point is the one armed by adpr_test_inject_panic.
func faultPoint(point string) {
	inject.Lock()
	armed := inject.point == point
	inject.Unlock()
	if armed {
		panic(fmt.Sprintf("injected panic at %s", point))
	}
}

// adpr_test_inject_panic arms the fault point named point (an export's name,
// or "<export>/locked" for the point inside a router's lock); NULL or ""
// disarms. Fault points stay armed until changed.
//
//export adpr_test_inject_panic
func adpr_test_inject_panic(point *C.char) {
	inject.Lock()
	defer inject.Unlock()
	inject.point = ""
	if point != nil {
		inject.point = C.GoString(point)
	}
}
