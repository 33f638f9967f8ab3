//go:build amd64 && !purego

#include "textflag.h"
#include "pyrandom_amd64.h"

// The vector seeders are generated: pyrandom_seed_amd64.s. What is here is
// written by hand: the shuffles' acceptance pass and the CPU feature checks.

// Which draws the shuffles of one seeding run accept, 8 lanes per register:
// _randbelow(n) takes the top bit_length(n) bits of a draw until they are
// below n, and the shift 32 - bit_length(n) is 158 minus the biased exponent
// of n as a float32 (exact below 2^24). n is in the register n, the mask of
// accepted draws in acc, Y14 holds the bit of this draw, Y15 158; R8 points
// at this draw's row of outputs.
#define ACCEPT(n, acc, off) \
	VCVTDQ2PS n, Y8; \
	VPSRLD    $23, Y8, Y8; \
	VPSUBD    Y8, Y15, Y8; \
	VMOVDQU   off(R8), Y9; \
	VPSRLVD   Y8, Y9, Y9; \
	VPCMPGTD  Y9, n, Y9; \
	VPADDD    Y9, n, n; \
	VPAND     Y14, Y9, Y9; \
	VPOR      Y9, acc, acc

#define ACCEPT4 \
	ACCEPT(Y0, Y4, 0); \
	ACCEPT(Y1, Y5, 32); \
	ACCEPT(Y2, Y6, 64); \
	ACCEPT(Y3, Y7, 96); \
	VPADDD Y14, Y14, Y14; \
	ADDQ   R9, R8

// func mtAcceptAVX2(out, masks *uint32, width, nout, m int)
//
// For each of width lanes (a multiple of 32) of lane-interleaved outputs
// (output t of lane l at out[t*width+l], nout <= 64 of them): which draws a
// shuffle of m < 2^24 items accepts, for n = m, m-1, ..., 2. Bit t of lane
// l's mask is set if draw t is accepted; bits 0..31 go to masks[l], bits
// 32..63 to masks[width+l]. Once n reaches 1 one more draw may be marked
// (no shuffle consumes it). 32 lanes at a time, as four interleaved
// vectors: n in Y0..Y3, the masks in Y4..Y7.
TEXT ·mtAcceptAVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), SI
	MOVQ masks+8(FP), DI
	MOVQ width+16(FP), R9
	SHLQ $2, R9
	MOVQ nout+24(FP), R10
	MOVQ m+32(FP), AX
	MOVL AX, X13
	VPBROADCASTD X13, Y13
	BROADCAST($1, Y12)
	BROADCAST($158, Y15) // last: BROADCAST goes through X15
	XORQ R11, R11

block:
	VMOVDQU Y13, Y0
	VMOVDQU Y13, Y1
	VMOVDQU Y13, Y2
	VMOVDQU Y13, Y3
	VPXOR   Y4, Y4, Y4
	VPXOR   Y5, Y5, Y5
	VPXOR   Y6, Y6, Y6
	VPXOR   Y7, Y7, Y7
	VMOVDQU Y12, Y14
	LEAQ    (SI)(R11*1), R8
	MOVQ    R10, CX
	CMPQ    CX, $32
	JLE     lowords
	MOVQ    $32, CX

lowords:
	TESTQ CX, CX
	JLE   lostore

loop4:
	ACCEPT4
	DECQ CX
	JNZ  loop4

lostore:
	LEAQ    (DI)(R11*1), DX
	VMOVDQU Y4, 0(DX)
	VMOVDQU Y5, 32(DX)
	VMOVDQU Y6, 64(DX)
	VMOVDQU Y7, 96(DX)
	VPXOR   Y4, Y4, Y4
	VPXOR   Y5, Y5, Y5
	VPXOR   Y6, Y6, Y6
	VPXOR   Y7, Y7, Y7
	VMOVDQU Y12, Y14
	MOVQ    R10, CX
	SUBQ    $32, CX
	JLE     histore

loop5:
	ACCEPT4
	DECQ CX
	JNZ  loop5

histore:
	ADDQ    R9, DX
	VMOVDQU Y4, 0(DX)
	VMOVDQU Y5, 32(DX)
	VMOVDQU Y6, 64(DX)
	VMOVDQU Y7, 96(DX)
	ADDQ    $128, R11
	CMPQ    R11, R9
	JLT     block

	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv0() (eax uint32)
TEXT ·xgetbv0(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	RET
