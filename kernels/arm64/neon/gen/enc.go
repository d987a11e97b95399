package main

import "fmt"

// Encoders for the A64 SIMD instructions Go's assembler has no mnemonic
// for. Each returns the instruction word and its LLVM/GNU spelling, which
// the generator writes as `WORD $0x...// spelling`; enc_test.go assembles
// every spelling in the generated file with llvm-mc and compares the words.
// Field layouts are from the Arm ARM (DDI 0487), section C4.1.

// v is a SIMD register number: VN in Go assembly, vN in the spellings.
type v uint32

// inst is one encoded instruction.
type inst struct {
	word uint32
	text string
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func (r v) check(limit uint32) uint32 {
	if uint32(r) >= limit {
		panic(fmt.Sprintf("register v%d out of range (< %d)", r, limit))
	}
	return uint32(r)
}

// long is a "three registers of different widths" op (SMULL, SMLAL):
// 0 Q 0 01110 size 1 Rm opcode 00 Rn Rd. size 0 widens bytes to halves,
// 1 halves to words; hi (Q=1, the "2" form) takes the upper halves.
func long(mn string, opcode, size uint32, hi bool, d, n, m v) inst {
	w := 0x0E200000 | b2u(hi)<<30 | size<<22 | m.check(32)<<16 | opcode<<12 | n.check(32)<<5 | d.check(32)
	wide, narrow := [2]string{"8h", "4s"}[size], [2]string{"8b", "4h"}[size]
	if hi {
		mn += "2"
		narrow = [2]string{"16b", "8h"}[size]
	}
	return inst{w, fmt.Sprintf("%s v%d.%s, v%d.%s, v%d.%s", mn, d, wide, n, narrow, m, narrow)}
}

func smull(size uint32, hi bool, d, n, m v) inst { return long("smull", 0xC, size, hi, d, n, m) }
func smlal(size uint32, hi bool, d, n, m v) inst { return long("smlal", 0x8, size, hi, d, n, m) }

// longElem is SMULL/SMLAL by element of halves into words:
// 0 Q 0 01111 01 L M Rm opcode H 0 Rn Rd, index H:L:M, Rm in v0-v15.
func longElem(mn string, opcode uint32, hi bool, d, n, m v, i int) inst {
	if i < 0 || i > 7 {
		panic("half index out of range")
	}
	ix := uint32(i)
	w := 0x0F000000 | b2u(hi)<<30 | 1<<22 | (ix>>1&1)<<21 | (ix&1)<<20 | m.check(16)<<16 | opcode<<12 | (ix>>2)<<11 | n.check(32)<<5 | d.check(32)
	narrow := "4h"
	if hi {
		mn += "2"
		narrow = "8h"
	}
	return inst{w, fmt.Sprintf("%s v%d.4s, v%d.%s, v%d.h[%d]", mn, d, n, narrow, m, i)}
}

func smullE(hi bool, d, n, m v, i int) inst { return longElem("smull", 0xA, hi, d, n, m, i) }
func smlalE(hi bool, d, n, m v, i int) inst { return longElem("smlal", 0x2, hi, d, n, m, i) }

// elemS is an op by a 32-bit element: integer MLA/MUL (size 10) and float
// FMLA/FMLS/FMUL (bit 23 set, sz 0) share 0 Q U 01111 10 L M Rm opcode H 0 Rn Rd,
// index H:L, Rm five bits (M its top).
func elemS(mn string, base uint32, q bool, d, n, m v, i int) inst {
	if i < 0 || i > 3 {
		panic("word index out of range")
	}
	ix := uint32(i)
	w := base | b2u(q)<<30 | 2<<22 | (ix&1)<<21 | m.check(32)<<16 | (ix>>1)<<11 | n.check(32)<<5 | d.check(32)
	arr := "2s"
	if q {
		arr = "4s"
	}
	return inst{w, fmt.Sprintf("%s v%d.%s, v%d.%s, v%d.s[%d]", mn, d, arr, n, arr, m, i)}
}

func mlaE(d, n, m v, i int) inst  { return elemS("mla", 0x2F000000, true, d, n, m, i) }
func mulE(d, n, m v, i int) inst  { return elemS("mul", 0x0F008000, true, d, n, m, i) }
func fmlaE(d, n, m v, i int) inst { return elemS("fmla", 0x0F001000, true, d, n, m, i) }
func fmlsE(d, n, m v, i int) inst { return elemS("fmls", 0x0F005000, true, d, n, m, i) }
func fmulE(d, n, m v, i int) inst { return elemS("fmul", 0x0F009000, true, d, n, m, i) }

// arrangements by size field and Q.
var arrs = [4][2]string{{"8b", "16b"}, {"4h", "8h"}, {"2s", "4s"}, {"1d", "2d"}}

// same is a "three registers of the same type" op:
// 0 Q U 01110 size 1 Rm opcode 1 Rn Rd (the base holds U and opcode;
// float ops carry sz 0 in bit 22 and their own bit 23 in the base).
func same(mn string, base, size uint32, q bool, d, n, m v) inst {
	w := base | b2u(q)<<30 | size<<22 | m.check(32)<<16 | n.check(32)<<5 | d.check(32)
	a := arrs[size][b2u(q)]
	return inst{w, fmt.Sprintf("%s v%d.%s, v%d.%s, v%d.%s", mn, d, a, n, a, m, a)}
}

func addp(size uint32, d, n, m v) inst { return same("addp", 0x0E20BC00, size, true, d, n, m) }
func and16(d, n, m v) inst             { return same("and", 0x0E201C00, 0, true, d, n, m) }
func orr16(d, n, m v) inst             { return same("orr", 0x0EA01C00, 0, true, d, n, m) }
func sub16(d, n, m v) inst             { return same("sub", 0x2E208400, 0, true, d, n, m) }
func zip1(size uint32, d, n, m v) inst { return same("zip1", 0x0E003800, size, true, d, n, m) }
func zip2(size uint32, d, n, m v) inst { return same("zip2", 0x0E007800, size, true, d, n, m) }

// fadd and fmla (vector, single precision): size field 10 would be double;
// sz 0 keeps single, so the arrangement is 2s/4s by Q.
func fadd(q bool, d, n, m v) inst {
	i := same("fadd", 0x0E20D400, 0, q, d, n, m)
	i.text = fmt.Sprintf("fadd v%d.%s, v%d.%s, v%d.%s", d, arrs[2][b2u(q)], n, arrs[2][b2u(q)], m, arrs[2][b2u(q)])
	return i
}

func fmla(q bool, d, n, m v) inst {
	i := same("fmla", 0x0E20CC00, 0, q, d, n, m)
	i.text = fmt.Sprintf("fmla v%d.%s, v%d.%s, v%d.%s", d, arrs[2][b2u(q)], n, arrs[2][b2u(q)], m, arrs[2][b2u(q)])
	return i
}

// sdot is the ARMv8.2 dot product (FEAT_DotProd): each word lane of d adds
// the four byte products of its lane: 0 1 0 01110 10 0 Rm 1001 0 1 Rn Rd.
func sdot(d, n, m v) inst {
	w := 0x4E809400 | m.check(32)<<16 | n.check(32)<<5 | d.check(32)
	return inst{w, fmt.Sprintf("sdot v%d.4s, v%d.16b, v%d.16b", d, n, m)}
}

// saddlp adds adjacent signed halves into words: 0 1 0 01110 01 10000 00010 10 Rn Rd.
func saddlp(d, n v) inst {
	return inst{0x4E602800 | n.check(32)<<5 | d.check(32), fmt.Sprintf("saddlp v%d.4s, v%d.8h", d, n)}
}

// scvtf converts four int32 lanes to float32, rounding to nearest even
// (FPCR's mode, which Go leaves at RN): 0 1 0 01110 0 0 10000 11101 10 Rn Rd.
func scvtf(d, n v) inst {
	return inst{0x4E21D800 | n.check(32)<<5 | d.check(32), fmt.Sprintf("scvtf v%d.4s, v%d.4s", d, n)}
}

// fcvtl widens the four low halves (f16) to float32, exactly: 0 0 0 01110 0 0 10000 10111 10 Rn Rd.
func fcvtl(d, n v) inst {
	return inst{0x0E217800 | n.check(32)<<5 | d.check(32), fmt.Sprintf("fcvtl v%d.4s, v%d.4h", d, n)}
}

// fcvtSH widens the f16 in Hn to float32 in Sd: FCVT, ftype 11, opc 00.
func fcvtSH(d, n v) inst {
	return inst{0x1EE24000 | n.check(32)<<5 | d.check(32), fmt.Sprintf("fcvt s%d, h%d", d, n)}
}

// faddp2 is the scalar pairwise add Sd = Vn.S[0] + Vn.S[1]: 0 1 1 11110 0 0 11000 01101 10 Rn Rd.
func faddp2(d, n v) inst {
	return inst{0x7E30D800 | n.check(32)<<5 | d.check(32), fmt.Sprintf("faddp s%d, v%d.2s", d, n)}
}

// ext16 takes bytes imm.. of n:m: 0 1 10 1110 00 0 Rm 0 imm4 0 Rn Rd.
func ext16(d, n, m v, imm uint32) inst {
	return inst{0x6E000000 | m.check(32)<<16 | (imm&15)<<11 | n.check(32)<<5 | d.check(32),
		fmt.Sprintf("ext v%d.16b, v%d.16b, v%d.16b, #%d", d, n, m, imm)}
}

// movS copies word lane i of n to Sd (DUP, scalar): 01 0 11110000 imm5 0 0000 1 Rn Rd.
func movS(d, n v, i int) inst {
	imm5 := uint32(i)<<3 | 4
	return inst{0x5E000400 | imm5<<16 | n.check(32)<<5 | d.check(32), fmt.Sprintf("mov s%d, v%d.s[%d]", d, n, i)}
}

// zero clears d: MOVI Vd.2D, #0.
func zero(d v) inst { return inst{0x6F00E400 | d.check(32), fmt.Sprintf("movi v%d.2d, #0", d)} }

// movi16 sets every byte of d: MOVI Vd.16B, #imm8, cmode 1110: 0 1 0 0111100000 abc 1110 0 1 defgh Rd.
func movi16(d v, imm uint32) inst {
	return inst{0x4F00E400 | (imm>>5&7)<<16 | (imm&31)<<5 | d.check(32), fmt.Sprintf("movi v%d.16b, #%d", d, imm)}
}

// Shifts of bytes by an immediate (immh 0001): USHR is 0 1 1 011110 immh:immb
// 00000 1 Rn Rd with immh:immb = 16-shift; SHL is 0 1 0 011110 immh:immb
// 01010 1 Rn Rd with immh:immb = 8+shift.
func ushr16(d, n v, sh uint32) inst {
	return inst{0x6F000400 | (16-sh)<<16 | n.check(32)<<5 | d.check(32), fmt.Sprintf("ushr v%d.16b, v%d.16b, #%d", d, n, sh)}
}

func shl16(d, n v, sh uint32) inst {
	return inst{0x4F005400 | (8+sh)<<16 | n.check(32)<<5 | d.check(32), fmt.Sprintf("shl v%d.16b, v%d.16b, #%d", d, n, sh)}
}

// xtl widens by SSHLL/USHLL #0 (the SXTL/UXTL aliases):
// 0 Q U 011110 immh 000 10100 1 Rn Rd, immh 0001 for bytes, 0010 for halves.
func xtl(signed, hi bool, size uint32, d, n v) inst {
	w := 0x0F00A400 | b2u(hi)<<30 | b2u(!signed)<<29 | (1<<size)<<19 | n.check(32)<<5 | d.check(32)
	mn := "sxtl"
	if !signed {
		mn = "uxtl"
	}
	wide, narrow := [2]string{"8h", "4s"}[size], [2]string{"8b", "4h"}[size]
	if hi {
		mn += "2"
		narrow = [2]string{"16b", "8h"}[size]
	}
	return inst{w, fmt.Sprintf("%s v%d.%s, v%d.%s", mn, d, wide, n, narrow)}
}
