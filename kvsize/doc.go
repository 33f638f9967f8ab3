// Package kvsize is the arithmetic of KV-cache memory, with no driver: how
// many bytes one token's KV takes on one rank (KVShape.BytesPerToken), how
// many tokens a rank's free memory can hold at start-up (SizeKV), and how a
// rank's engine-reported pool shrinks when the device runs short of memory
// at run time (Guard). Package nvml reads the memory figures these take from
// the GPU; this package needs none, so hosts and tests can size budgets on
// any machine.
//
// Every error wraps ErrInvalid and says what was wrong and what was
// expected.
package kvsize

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error of this package: an input that makes
// no sense (a zero bytes-per-token, a fraction outside (0, 1], a shape with
// fields of the other architecture, a product that overflows 64 bits).
var ErrInvalid = errors.New("invalid KV sizing input")

// invalidf returns an error wrapping ErrInvalid whose text says what was
// wrong and what was expected.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("kvsize: %w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
