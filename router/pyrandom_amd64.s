//go:build amd64 && !purego

#include "textflag.h"

// The seeders below run init_by_array for 8 lanes per YMM register, with G
// registers (G*8 seeds) interleaved so that the ~7-cycle dependent chain of
// one step (shift, xor, multiply, xor, add) overlaps across seeds. The state
// is lane-interleaved: word i of lane l at st[i*G*8 + l].

// One step of the first loop for the lanes in p: p = (base ^ ((p ^ (p >> 30))
// * 1664525)) + add, stored to the state. Y12 holds the multiplier, Y13 the
// broadcast base word, Y14 is scratch; SI points at the addends, DX at the
// state row.
#define SEED1(p, addoff, dstoff) \
	VPSRLD  $30, p, Y14; \
	VPXOR   p, Y14, Y14; \
	VPMULLD Y12, Y14, Y14; \
	VPXOR   Y13, Y14, Y14; \
	VPADDD  addoff(SI), Y14, p; \
	VMOVDQU p, dstoff(DX)

// The wrap step of the first loop: as SEED1 with the state word as base.
#define WRAP1(p, addoff, off) \
	VPSRLD  $30, p, Y14; \
	VPXOR   p, Y14, Y14; \
	VPMULLD Y12, Y14, Y14; \
	VPXOR   off(DX), Y14, Y14; \
	VPADDD  addoff(SI), Y14, p; \
	VMOVDQU p, off(DX)

// One step of the second loop: p = (mt[i] ^ ((p ^ (p >> 30)) * 1566083941))
// - i, with Y12 the multiplier and Y13 the broadcast i.
#define SEED2(p, off) \
	VPSRLD  $30, p, Y14; \
	VPXOR   p, Y14, Y14; \
	VPMULLD Y12, Y14, Y14; \
	VPXOR   off(DX), Y14, Y14; \
	VPSUBD  Y13, Y14, p; \
	VMOVDQU p, off(DX)

// Tempered output of one 8-lane cell: temper(mix(mt[t], mt[t+1],
// mt[t+397])) with DX at mt[t]'s cell, row the state row size in bytes,
// stored at R8. Y8..Y12: upper mask, lower mask, matrix A, tempering masks B
// and C; Y0..Y2 scratch.
#define OUTPUT(row) \
	VPAND   0(DX), Y8, Y0; \
	VPAND   row(DX), Y9, Y1; \
	VPOR    Y1, Y0, Y0; \
	VPSRLD  $1, Y0, Y1; \
	VPXOR   (397*row)(DX), Y1, Y1; \
	VPSLLD  $31, Y0, Y2; \
	VPSRAD  $31, Y2, Y2; \
	VPAND   Y10, Y2, Y2; \
	VPXOR   Y2, Y1, Y1; \
	VPSRLD  $11, Y1, Y2; \
	VPXOR   Y2, Y1, Y1; \
	VPSLLD  $7, Y1, Y2; \
	VPAND   Y11, Y2, Y2; \
	VPXOR   Y2, Y1, Y1; \
	VPSLLD  $15, Y1, Y2; \
	VPAND   Y12, Y2, Y2; \
	VPXOR   Y2, Y1, Y1; \
	VPSRLD  $18, Y1, Y2; \
	VPXOR   Y2, Y1, Y1; \
	VMOVDQU Y1, 0(R8)

#define BROADCAST(imm, reg) \
	MOVL         imm, AX; \
	MOVL         AX, X15; \
	VPBROADCASTD X15, reg

// func mtSeed32AVX2(st, add, out *uint32, nout int)
TEXT ·mtSeed32AVX2(SB), NOSPLIT, $0-32
	MOVQ st+0(FP), DI
	MOVQ add+8(FP), SI
	LEAQ ·mtGenrandBase(SB), BX

	// First loop over i = 1..623: odd i add add[0], even i add[1].
	BROADCAST($1664525, Y12)
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
	LEAQ 128(DI), DX
	WRAP1(Y0, 128, 0)
	WRAP1(Y1, 160, 32)
	WRAP1(Y2, 192, 64)
	WRAP1(Y3, 224, 96)

	// Second loop over i = 2..623.
	BROADCAST($1566083941, Y12)
	BROADCAST($1, Y15)
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

	// Outputs t < nout, one 8-lane cell at a time.
	MOVQ         out+16(FP), R8
	MOVQ         nout+24(FP), CX
	SHLQ         $2, CX
	BROADCAST($0x80000000, Y8)
	VPCMPEQD     Y9, Y9, Y9
	VPSRLD       $1, Y9, Y9
	BROADCAST($0x9908b0df, Y10)
	BROADCAST($0x9d2c5680, Y11)
	BROADCAST($0xefc60000, Y12)
	MOVQ         DI, DX
	TESTQ        CX, CX
	JLE          done

loop3:
	OUTPUT(128)
	ADDQ    $32, DX
	ADDQ    $32, R8
	DECQ    CX
	JNZ     loop3

done:
	VZEROUPPER
	RET

// func mtSeed64AVX2(st, add, out *uint32, nout int)
TEXT ·mtSeed64AVX2(SB), NOSPLIT, $0-32
	MOVQ st+0(FP), DI
	MOVQ add+8(FP), SI
	LEAQ ·mtGenrandBase(SB), BX

	// First loop over i = 1..623: odd i add add[0], even i add[1].
	BROADCAST($1664525, Y12)
	VPBROADCASTD (BX), Y0
	VMOVDQU      Y0, Y1
	VMOVDQU      Y0, Y2
	VMOVDQU      Y0, Y3
	VMOVDQU      Y0, Y4
	VMOVDQU      Y0, Y5
	VMOVDQU      Y0, Y6
	VMOVDQU      Y0, Y7
	MOVQ         $1, CX
	LEAQ         256(DI), DX

loop1:
	VPBROADCASTD (BX)(CX*4), Y13
	SEED1(Y0, 0, 0)
	SEED1(Y1, 32, 32)
	SEED1(Y2, 64, 64)
	SEED1(Y3, 96, 96)
	SEED1(Y4, 128, 128)
	SEED1(Y5, 160, 160)
	SEED1(Y6, 192, 192)
	SEED1(Y7, 224, 224)
	ADDQ         $256, DX
	INCQ         CX
	VPBROADCASTD (BX)(CX*4), Y13
	SEED1(Y0, 256, 0)
	SEED1(Y1, 288, 32)
	SEED1(Y2, 320, 64)
	SEED1(Y3, 352, 96)
	SEED1(Y4, 384, 128)
	SEED1(Y5, 416, 160)
	SEED1(Y6, 448, 192)
	SEED1(Y7, 480, 224)
	ADDQ         $256, DX
	INCQ         CX
	CMPQ         CX, $623
	JLT          loop1

	// i = 623 (odd).
	VPBROADCASTD (BX)(CX*4), Y13
	SEED1(Y0, 0, 0)
	SEED1(Y1, 32, 32)
	SEED1(Y2, 64, 64)
	SEED1(Y3, 96, 96)
	SEED1(Y4, 128, 128)
	SEED1(Y5, 160, 160)
	SEED1(Y6, 192, 192)
	SEED1(Y7, 224, 224)

	// The wrap: i = 1 again, with the even addend and mt[1] as the base.
	LEAQ 256(DI), DX
	WRAP1(Y0, 256, 0)
	WRAP1(Y1, 288, 32)
	WRAP1(Y2, 320, 64)
	WRAP1(Y3, 352, 96)
	WRAP1(Y4, 384, 128)
	WRAP1(Y5, 416, 160)
	WRAP1(Y6, 448, 192)
	WRAP1(Y7, 480, 224)

	// Second loop over i = 2..623.
	BROADCAST($1566083941, Y12)
	BROADCAST($1, Y15)
	VPADDD       Y15, Y15, Y13
	MOVQ         $2, CX
	LEAQ         512(DI), DX

loop2:
	SEED2(Y0, 0)
	SEED2(Y1, 32)
	SEED2(Y2, 64)
	SEED2(Y3, 96)
	SEED2(Y4, 128)
	SEED2(Y5, 160)
	SEED2(Y6, 192)
	SEED2(Y7, 224)
	VPADDD Y15, Y13, Y13
	ADDQ   $256, DX
	INCQ   CX
	CMPQ   CX, $624
	JLT    loop2

	// After the wrap, i = 1 once more; then mt[0] = 0x80000000.
	LEAQ    256(DI), DX
	VMOVDQU Y15, Y13
	SEED2(Y0, 0)
	SEED2(Y1, 32)
	SEED2(Y2, 64)
	SEED2(Y3, 96)
	SEED2(Y4, 128)
	SEED2(Y5, 160)
	SEED2(Y6, 192)
	SEED2(Y7, 224)
	VPSLLD  $31, Y15, Y0
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)

	// Outputs t < nout, one 8-lane cell at a time.
	MOVQ         out+16(FP), R8
	MOVQ         nout+24(FP), CX
	SHLQ         $3, CX
	BROADCAST($0x80000000, Y8)
	VPCMPEQD     Y9, Y9, Y9
	VPSRLD       $1, Y9, Y9
	BROADCAST($0x9908b0df, Y10)
	BROADCAST($0x9d2c5680, Y11)
	BROADCAST($0xefc60000, Y12)
	MOVQ         DI, DX
	TESTQ        CX, CX
	JLE          done

loop3:
	OUTPUT(256)
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
