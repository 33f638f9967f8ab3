package main

import (
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router"
)

// Every reason and exclusion the router can record has its own C code: a
// value added to the router without one here would index past the tables.
func TestReceiptCodesComplete(t *testing.T) {
	if s := router.Reason(len(reasonCodes)).String(); !strings.HasPrefix(s, "Reason(") {
		t.Errorf("router.Reason %d (%s) has no ADPR_REASON_* code", len(reasonCodes), s)
	}
	if s := router.Exclusion(len(exclusionCodes)).String(); !strings.HasPrefix(s, "Exclusion(") {
		t.Errorf("router.Exclusion %d (%s) has no ADPR_EXCLUDED_* code", len(exclusionCodes), s)
	}
	seen := map[int]bool{}
	for r, c := range reasonCodes {
		if seen[int(c)] {
			t.Errorf("%s shares the code %d", router.Reason(r), int(c))
		}
		seen[int(c)] = true
	}
}
