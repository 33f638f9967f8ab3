//go:build !adpr_faultinject

package main

// faultPoint is where the adpr_faultinject test build panics on demand
// (fault_on.go); in the release build it does nothing and is inlined away.
func faultPoint(string) {}
