//go:build amd64 && !purego

#include "textflag.h"

// One step of init_by_array's first loop for the eight lanes in p:
// p = (base ^ ((p ^ (p >> 30)) * 1664525)) + add, stored to the state.
// Y12 holds the multiplier, Y13 the broadcast base word, Y14 is scratch.
#define SEED1(p, addoff, dstoff) \
	VPSRLD  $30, p, Y14; \
	VPXOR   p, Y14, Y14; \
	VPMULLD Y12, Y14, Y14; \
	VPXOR   Y13, Y14, Y14; \
	VPADDD  addoff(SI), Y14, p; \
	VMOVDQU p, dstoff(DX)

// One step of the second loop: p = (mt[i] ^ ((p ^ (p >> 30)) * 1566083941)) - i,
// with Y12 the multiplier and Y13 the broadcast i.
#define SEED2(p, off) \
	VPSRLD  $30, p, Y14; \
	VPXOR   p, Y14, Y14; \
	VPMULLD Y12, Y14, Y14; \
	VPXOR   off(DX), Y14, Y14; \
	VPSUBD  Y13, Y14, p; \
	VMOVDQU p, off(DX)

// func mtSeedLanesAVX2(st *[mtN][mtLanes]uint32, add *[2][mtLanes]uint32, out *uint32, nout int)
TEXT ·mtSeedLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ st+0(FP), DI
	MOVQ add+8(FP), SI
	LEAQ ·mtGenrandBase(SB), BX

	// First loop over i = 1..623, odd i adding add[0], even i add[1].
	MOVL         $1664525, AX
	MOVL         AX, X12
	VPBROADCASTD X12, Y12
	VPBROADCASTD (BX), Y0
	VMOVDQU      Y0, Y1
	VMOVDQU      Y0, Y2
	VMOVDQU      Y0, Y3
	MOVQ         $1, CX
	LEAQ         128(DI), DX

loop1:
	VPBROADCASTD (BX)(CX*4), Y13
	SEED1(Y0, 0, 0)
	SEED1(Y1, 32, 32)
	SEED1(Y2, 64, 64)
	SEED1(Y3, 96, 96)
	ADDQ         $128, DX
	INCQ         CX
	VPBROADCASTD (BX)(CX*4), Y13
	SEED1(Y0, 128, 0)
	SEED1(Y1, 160, 32)
	SEED1(Y2, 192, 64)
	SEED1(Y3, 224, 96)
	ADDQ         $128, DX
	INCQ         CX
	CMPQ         CX, $623
	JLT          loop1

	// i = 623 (odd).
	VPBROADCASTD (BX)(CX*4), Y13
	SEED1(Y0, 0, 0)
	SEED1(Y1, 32, 32)
	SEED1(Y2, 64, 64)
	SEED1(Y3, 96, 96)

	// The wrap: i = 1 again, with the even addend and mt[1] as the base.
	LEAQ    128(DI), DX
	VPSRLD  $30, Y0, Y14
	VPXOR   Y0, Y14, Y14
	VPMULLD Y12, Y14, Y14
	VPXOR   0(DX), Y14, Y14
	VPADDD  128(SI), Y14, Y0
	VMOVDQU Y0, 0(DX)
	VPSRLD  $30, Y1, Y14
	VPXOR   Y1, Y14, Y14
	VPMULLD Y12, Y14, Y14
	VPXOR   32(DX), Y14, Y14
	VPADDD  160(SI), Y14, Y1
	VMOVDQU Y1, 32(DX)
	VPSRLD  $30, Y2, Y14
	VPXOR   Y2, Y14, Y14
	VPMULLD Y12, Y14, Y14
	VPXOR   64(DX), Y14, Y14
	VPADDD  192(SI), Y14, Y2
	VMOVDQU Y2, 64(DX)
	VPSRLD  $30, Y3, Y14
	VPXOR   Y3, Y14, Y14
	VPMULLD Y12, Y14, Y14
	VPXOR   96(DX), Y14, Y14
	VPADDD  224(SI), Y14, Y3
	VMOVDQU Y3, 96(DX)

	// Second loop over i = 2..623.
	MOVL         $1566083941, AX
	MOVL         AX, X12
	VPBROADCASTD X12, Y12
	MOVL         $1, AX
	MOVL         AX, X15
	VPBROADCASTD X15, Y15
	VPADDD       Y15, Y15, Y13
	MOVQ         $2, CX
	LEAQ         256(DI), DX

loop2:
	SEED2(Y0, 0)
	SEED2(Y1, 32)
	SEED2(Y2, 64)
	SEED2(Y3, 96)
	VPADDD Y15, Y13, Y13
	ADDQ   $128, DX
	INCQ   CX
	CMPQ   CX, $624
	JLT    loop2

	// After the wrap, i = 1 once more; then mt[0] = 0x80000000.
	LEAQ    128(DI), DX
	VMOVDQU Y15, Y13
	SEED2(Y0, 0)
	SEED2(Y1, 32)
	SEED2(Y2, 64)
	SEED2(Y3, 96)
	VPSLLD  $31, Y15, Y0
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)

	// Outputs t < nout: temper(mix(mt[t], mt[t+1], mt[t+397])), one
	// 8-lane cell at a time (cell j of row t is at 128*t + 32*j).
	MOVQ         out+16(FP), R8
	MOVQ         nout+24(FP), CX
	SHLQ         $2, CX          // cells
	MOVL         $0x80000000, AX
	MOVL         AX, X8
	VPBROADCASTD X8, Y8          // upper mask
	VPCMPEQD     Y9, Y9, Y9
	VPSRLD       $1, Y9, Y9      // lower mask
	MOVL         $0x9908b0df, AX
	MOVL         AX, X10
	VPBROADCASTD X10, Y10
	MOVL         $0x9d2c5680, AX
	MOVL         AX, X11
	VPBROADCASTD X11, Y11
	MOVL         $0xefc60000, AX
	MOVL         AX, X12
	VPBROADCASTD X12, Y12
	MOVQ         DI, DX
	TESTQ        CX, CX
	JLE          done

loop3:
	VPAND   0(DX), Y8, Y0
	VPAND   128(DX), Y9, Y1
	VPOR    Y1, Y0, Y0             // y
	VPSRLD  $1, Y0, Y1
	VPXOR   50816(DX), Y1, Y1      // mt[t+397] ^ y>>1 (397*128 = 50816)
	VPSLLD  $31, Y0, Y2
	VPSRAD  $31, Y2, Y2
	VPAND   Y10, Y2, Y2
	VPXOR   Y2, Y1, Y1             // mixed word
	VPSRLD  $11, Y1, Y2
	VPXOR   Y2, Y1, Y1
	VPSLLD  $7, Y1, Y2
	VPAND   Y11, Y2, Y2
	VPXOR   Y2, Y1, Y1
	VPSLLD  $15, Y1, Y2
	VPAND   Y12, Y2, Y2
	VPXOR   Y2, Y1, Y1
	VPSRLD  $18, Y1, Y2
	VPXOR   Y2, Y1, Y1
	VMOVDQU Y1, 0(R8)
	ADDQ    $32, DX
	ADDQ    $32, R8
	DECQ    CX
	JNZ     loop3

done:
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
