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

	"go.uber.org/atomic"
)

// injectPoint is the fault point armed by adpr_test_inject_panic; "" when
// none is.
var injectPoint atomic.String

// faultPoint panics when point is the one armed by adpr_test_inject_panic.
func faultPoint(point string) {
	if injectPoint.Load() == point {
		panic(fmt.Sprintf("injected panic at %s", point))
	}
}

// adpr_test_inject_panic arms the fault point named point (an export's name,
// or "<export>/locked" for the point inside a router's lock); NULL or ""
// disarms. Fault points stay armed until changed.
//
//export adpr_test_inject_panic
func adpr_test_inject_panic(point *C.char) {
	p := ""
	if point != nil {
		p = C.GoString(point)
	}
	injectPoint.Store(p)
}
