//go:build amd64 && !purego

#include "textflag.h"

// func prefetchPrefix(p *int32)
//
// PREFETCHT0 of the 256 bytes from p (PrefixTokens int32 tokens): five
// lines cover them at any alignment. A hint: it never faults, and nothing
// it does is visible to the program.
TEXT ·prefetchPrefix(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 0(AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	PREFETCHT0 255(AX)
	RET
