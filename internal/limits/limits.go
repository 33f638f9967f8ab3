// Package limits holds the C boundary's bounds on its inputs and outputs,
// the ones that are not the router's own (those live in package router). The
// header's limit #defines are generated from them and from the router's
// (internal/schemagen), and capi checks at compile time that the header it
// is built against says the same.
package limits

const (
	// MaxOptions bounds adpr_router_create's num_options.
	MaxOptions = 256
	// MaxOptionBytes bounds one option key or value, in bytes.
	MaxOptionBytes = 4096
	// MaxRequests bounds adpr_batch.num_requests: far above any
	// iteration's batch, low enough that a corrupt count is an error rather
	// than the host's memory.
	MaxRequests = 1 << 22
	// MaxDeviceBytes bounds an NVML device selector (a UUID is 40 bytes, a
	// PCI bus id 16).
	MaxDeviceBytes = 256
	// MessageMax is the longest error message or reason the library writes,
	// NUL included: a buffer of this many bytes always holds the whole text.
	MessageMax = 512
)
