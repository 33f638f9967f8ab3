// Package invariants says whether this build checks the router's
// incrementally kept state against a recount after every change (as
// pebble's internal/invariants does). Build or test with -tags invariants
// to turn the checks on; ./build.sh test runs the router's property, fuzz,
// differential and fixture tests that way. A failed check panics with what
// differed: it is a bug in the router, never bad input.
package invariants
