// Command gen writes the arm64 NEON assembly of package neon: the row dots
// of Q8_0 and the k-quants in the orders runtime/exec runs (kernels/cpugen's
// DotQ8_0AVX2, DotQ4_KRepack8x8, DotQ4_KAVX2, DotQ6_KAVX2), each in two
// builds: ARMv8.0 NEON (SMULL/SMLAL widening products) and FEAT_DotProd
// (SDOT). Integer sums are exact in any grouping, so both builds compute
// each order's int32 lanes exactly and then do its float operations in its
// order: FMLA where the order has an FMA (quant.FMA32 rounds once, as FMLA
// does), separate FMUL/FADD where it rounds separately.
//
// Go's assembler lacks most of these SIMD instructions, so they are
// written as WORDs (enc.go) with their spelling in a comment.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

type gen struct{ b bytes.Buffer }

// op writes a line of Go assembly.
func (g *gen) op(format string, a ...any) { fmt.Fprintf(&g.b, "\t"+format+"\n", a...) }

// label starts a block.
func (g *gen) label(l string) { fmt.Fprintf(&g.b, "%s:\n", l) }

// e writes encoded instructions.
func (g *gen) e(is ...inst) {
	for _, i := range is {
		fmt.Fprintf(&g.b, "\tWORD $0x%08x // %s\n", i.word, i.text)
	}
}

func (g *gen) comment(s string) { fmt.Fprintf(&g.b, "\n\t// %s\n", s) }

// variant is one build: SDOT or the ARMv8.0 widening products.
type variant struct {
	dot    bool
	suffix string
}

var variants = []variant{{false, "NEON"}, {true, "DotProd"}}

// kernel is one generated function (cpukern.Rows shape).
type kernel struct {
	name string
	doc  string
}

var kernels []kernel

// header starts a rows kernel: nb blocks a row, rows weight rows wstride
// bytes apart against one activation row, out[r], prefetching pf bytes
// ahead. Registers: R0 nb, R1 weight row, R2 wstride, R3 x, R4 rows left,
// R5 out, R6 pf; per row R7 and R8 walk the weight and activation blocks,
// R9 counts blocks.
func (g *gen) header(name, doc string) {
	kernels = append(kernels, kernel{name, doc})
	fmt.Fprintf(&g.b, "\n// func %s(nb int, w *byte, wstride int, x *byte, rows int, out *float32, pf int)\n", name)
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT|NOFRAME, $0-56\n", name)
	g.op("MOVD nb+0(FP), R0")
	g.op("MOVD w+8(FP), R1")
	g.op("MOVD wstride+16(FP), R2")
	g.op("MOVD x+24(FP), R3")
	g.op("MOVD rows+32(FP), R4")
	g.op("MOVD out+40(FP), R5")
	g.op("MOVD pf+48(FP), R6")
}

// rowStart begins a row; blockStart a block, prefetching every cache line
// of the weight block pf bytes ahead (rows are contiguous, so past a row's
// end this fetches the next row).
func (g *gen) rowStart() {
	g.label("row")
	g.op("MOVD R1, R7")
	g.op("MOVD R3, R8")
	g.op("MOVD R0, R9")
}

func (g *gen) blockStart(wbytes int) {
	g.label("block")
	g.op("ADD R6, R7, R10")
	for off := 0; off < wbytes; off += 64 {
		g.op("PRFM %d(R10), PLDL1KEEP", off)
	}
}

func (g *gen) blockEnd(wbytes, xbytes int) {
	g.op("ADD $%d, R7", wbytes)
	g.op("ADD $%d, R8", xbytes)
	g.op("SUBS $1, R9")
	g.op("BNE block")
}

// rowEnd stores S0 to out[r] and moves to the next row.
func (g *gen) rowEnd() {
	g.op("FMOVS F0, (R5)")
	g.op("ADD $4, R5")
	g.op("ADD R2, R1")
	g.op("SUBS $1, R4")
	g.op("BNE row")
	g.op("RET")
}

// hsum8 leaves in S0 hsum_float_8 of the lanes lo (l0..l3) and hi
// (l4..l7): ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), each add rounded (the
// cpugen orders' TreeHalving); t is scratch.
func (g *gen) hsum8(lo, hi, t v) {
	g.e(fadd(true, 0, lo, hi), ext16(t, 0, 0, 8), fadd(false, 0, 0, t), faddp2(0, 0))
}

// plusZero is the orders' `0 + sum` (it turns -0 into +0).
func (g *gen) plusZero(t v) {
	g.e(zero(t))
	g.op("FADDS F%d, F0, F0", t) // F0 = F0 + Ft, the same bits as 0 + F0
}

// q80 is DotQ8_0AVX2: per 32-value block eight int32 lanes, lane t the
// products of bytes 4t..4t+3, each lane acc[t] = fma(float(lane), dW·dX,
// acc[t]); then hsum_float_8 and 0 + sum.
func q80(g *gen, vr variant) {
	name := "q80Rows" + vr.suffix
	g.header(name, "DotQ8_0AVX2")
	g.rowStart()
	g.e(zero(0), zero(1)) // acc lanes 0-3, 4-7
	g.blockStart(34)
	g.comment("d = f32(dW)·f32(dX), rounded to float32")
	g.op("MOVHU (R7), R10")
	g.op("MOVHU (R8), R11")
	g.op("FMOVS R10, F2")
	g.op("FMOVS R11, F3")
	g.e(fcvtSH(2, 2), fcvtSH(3, 3))
	g.op("FMULS F3, F2, F2")
	g.op("ADD $2, R7, R10")
	g.op("VLD1 (R10), [V4.B16, V5.B16]")
	g.op("ADD $2, R8, R11")
	g.op("VLD1 (R11), [V6.B16, V7.B16]")
	if vr.dot {
		g.comment("lane t = Σ bytes 4t..4t+3: SDOT's own lanes")
		g.e(zero(16), zero(18), sdot(16, 4, 6), sdot(18, 5, 7))
	} else {
		g.comment("products as int16 (|-128·-128| fits), pairs widened to int32, then pairs of pairs")
		g.e(smull(0, false, 16, 4, 6), smull(0, true, 17, 4, 6), smull(0, false, 18, 5, 7), smull(0, true, 19, 5, 7))
		g.e(saddlp(16, 16), saddlp(17, 17), saddlp(18, 18), saddlp(19, 19))
		g.e(addp(2, 16, 16, 17), addp(2, 18, 18, 19))
	}
	g.comment("acc[t] = fma(float(lane t), d, acc[t]), rounded once")
	g.e(scvtf(16, 16), scvtf(18, 18), fmlaE(0, 16, 2, 0), fmlaE(1, 18, 2, 0))
	g.blockEnd(34, 34)
	g.hsum8(0, 1, 3)
	g.plusZero(1)
	g.rowEnd()
}

// Q4_K blocks: d f16, dmin f16, 12 bytes of packed 6-bit scales and mins,
// 128 bytes of nibbles (chunk c of 32 bytes: low nibbles are sub-block 2c,
// high 2c+1). Q8_K: d f32, 256 quants, 16 int16 bsums at 260.

// q4kScales unpacks the scales into V9 (sc0..7 as uint16) and V10 (mn0..7),
// as ggml's utmp shuffle of get_scale_min_k4; the SDOT build also widens
// the scales to words, V11 (sc0..3) and V12 (sc4..7).
func q4kScales(g *gen, vr variant) {
	g.comment("scales and mins: ggml's utmp unpacking of the 12 bytes")
	g.op("MOVWU 4(R7), R10")
	g.op("MOVWU 8(R7), R11")
	g.op("MOVWU 12(R7), R12")
	g.op("ANDW $0x3f3f3f3f, R10, R13") // sc0..3
	g.op("ANDW $0x3f3f3f3f, R11, R14") // mn0..3
	g.op("LSRW $6, R10, R15")
	g.op("ANDW $0x03030303, R15, R15")
	g.op("ANDW $0x0f0f0f0f, R12, R16")
	g.op("ORRW R15<<4, R16, R16") // sc4..7
	g.op("LSRW $6, R11, R15")
	g.op("ANDW $0x03030303, R15, R15")
	g.op("LSRW $4, R12, R17")
	g.op("ANDW $0x0f0f0f0f, R17, R17")
	g.op("ORRW R15<<4, R17, R17") // mn4..7
	g.op("ORR R16<<32, R13, R13")
	g.op("ORR R17<<32, R14, R14")
	g.op("VMOV R13, V8.D[0]")
	g.op("VMOV R14, V8.D[1]")
	g.e(xtl(false, false, 0, 9, 8), xtl(false, true, 0, 10, 8))
	if vr.dot {
		g.e(xtl(false, false, 1, 11, 9), xtl(false, true, 1, 12, 9))
	}
}

// q4kMins leaves in V7 the four int32 p_u = Σ_{g=4u..4u+3} mn[g/2]·bsum[g],
// exact for any bsums (products widened before they are added).
func q4kMins(g *gen) {
	g.comment("mins: p_u = Σ mn[g/2]·bsums[g], g = 4u..4u+3")
	g.op("ADD $260, R8, R10")
	g.op("VLD1 (R10), [V28.H8, V29.H8]")
	g.e(zip1(1, 30, 10, 10), zip2(1, 31, 10, 10)) // mn0,mn0,mn1,mn1,...
	g.e(smull(1, false, 24, 28, 30), smull(1, true, 25, 28, 30), smull(1, false, 26, 29, 31), smull(1, true, 27, 29, 31))
	g.e(addp(2, 24, 24, 25), addp(2, 26, 26, 27), addp(2, 7, 24, 26))
}

// q4kD leaves [f32(dW)·dY, f32(dminW)·dY] in lanes 0 and 1 of V1 (V3 scratch).
func q4kD(g *gen) {
	g.op("MOVWU (R7), R12")
	g.op("VMOV R12, V1.S[0]")
	g.op("FMOVS (R8), F3")
	g.e(fcvtl(1, 1), fmulE(1, 1, 3, 0))
}

// q4kSubBlocks runs sub emit(j, qa, qb, ya, yb) for the eight 32-value
// sub-blocks: qa, qb its nibbles (16 bytes each), ya, yb the matching
// activation bytes. V2 holds 0x0f in every byte.
func q4kSubBlocks(g *gen, sub func(j int, qa, qb, ya, yb v)) {
	g.op("ADD $16, R7, R10")
	g.op("ADD $4, R8, R11")
	for half := 0; half < 2; half++ {
		g.op("VLD1.P 64(R10), [V20.B16, V21.B16, V22.B16, V23.B16]")
		for c := 0; c < 2; c++ {
			j := 2 * (2*half + c)
			qa, qb := v(20+2*c), v(21+2*c)
			g.comment(fmt.Sprintf("sub-blocks %d and %d", j, j+1))
			g.e(and16(24, qa, 2), and16(25, qb, 2), ushr16(26, qa, 4), ushr16(27, qb, 4))
			g.op("VLD1.P 64(R11), [V16.B16, V17.B16, V18.B16, V19.B16]")
			sub(j, 24, 25, 16, 17)
			sub(j+1, 26, 27, 18, 19)
		}
	}
}

// q4kr8 is DotQ4_KRepack8x8: per block the whole integer sum
// s = Σ sc_j·Σ q·y and mins sum m = Σ p_u, then sum = fma(d, s, sum) and
// msum = fma(dmin, m, msum) (lanes 0 and 1 of V0); the row is sum - msum.
func q4kr8(g *gen, vr variant) {
	name := "q4kr8Rows" + vr.suffix
	g.header(name, "DotQ4_KRepack8x8")
	g.e(movi16(2, 0x0f))
	g.rowStart()
	g.e(zero(0))
	g.blockStart(144)
	q4kScales(g, vr)
	q4kMins(g)
	q4kSubBlocks(g, func(j int, qa, qb, ya, yb v) {
		if vr.dot {
			// V13 += sc_j · (four word lanes of the sub-block's products)
			g.e(zero(28), sdot(28, qa, ya), sdot(28, qb, yb))
			if j == 0 {
				g.e(mulE(13, 28, v(11+j/4), j%4))
			} else {
				g.e(mlaE(13, 28, v(11+j/4), j%4))
			}
			return
		}
		// int16 lanes of four products each (|q·y| ≤ 15·128), then
		// widened by the scale into V13's words
		g.e(smull(0, false, 28, qa, ya), smlal(0, true, 28, qa, ya), smlal(0, false, 28, qb, yb), smlal(0, true, 28, qb, yb))
		if j == 0 {
			g.e(smullE(false, 13, 28, 9, j))
		} else {
			g.e(smlalE(false, 13, 28, 9, j))
		}
		g.e(smlalE(true, 13, 28, 9, j))
	})
	g.comment("[s, m]: the block's integer sums; then [sum, msum] += [s, m]·[d, dmin], each rounded once")
	g.e(addp(2, 13, 13, 7), addp(2, 13, 13, 13), scvtf(13, 13))
	q4kD(g)
	g.e(fmla(false, 0, 13, 1))
	g.blockEnd(144, 292)
	g.e(movS(1, 0, 1))
	g.op("FSUBS F1, F0, F0")
	g.rowEnd()
}

// q4kAVX2 is DotQ4_KAVX2: eight int32 lanes per block, lane t the bytes
// 4t..4t+3 of each 32-value sub-block times its scale, acc[t] = fma(d,
// lane t, acc[t]) (V0 lanes 0-3, V6 4-7); four mins lanes m_u = fma(-dY·dminW,
// p_u, m_u) (V5); the row is (0 + hsum_float_8(acc)) + ((m0+m2)+(m1+m3)).
func q4kAVX2(g *gen, vr variant) {
	name := "q4kRows" + vr.suffix
	g.header(name, "DotQ4_KAVX2")
	g.e(movi16(2, 0x0f))
	g.rowStart()
	g.e(zero(0), zero(6), zero(5))
	g.blockStart(144)
	q4kScales(g, vr)
	q4kMins(g)
	q4kSubBlocks(g, func(j int, qa, qb, ya, yb v) {
		if vr.dot {
			g.e(zero(28), zero(29), sdot(28, qa, ya), sdot(29, qb, yb))
			if j == 0 {
				g.e(mulE(13, 28, v(11+j/4), j%4), mulE(14, 29, v(11+j/4), j%4))
			} else {
				g.e(mlaE(13, 28, v(11+j/4), j%4), mlaE(14, 29, v(11+j/4), j%4))
			}
			return
		}
		// products as int16, summed in fours (≤ 4·15·128) into the eight
		// lanes, widened by the scale: lanes 0-3 into V13, 4-7 into V14
		g.e(smull(0, false, 28, qa, ya), smull(0, true, 29, qa, ya), smull(0, false, 30, qb, yb), smull(0, true, 31, qb, yb))
		g.e(addp(1, 28, 28, 29), addp(1, 30, 30, 31), addp(1, 28, 28, 30))
		if j == 0 {
			g.e(smullE(false, 13, 28, 9, j), smullE(true, 14, 28, 9, j))
		} else {
			g.e(smlalE(false, 13, 28, 9, j), smlalE(true, 14, 28, 9, j))
		}
	})
	g.comment("acc[t] = fma(d, lane t, acc[t]); m_u = fma(-dmin, p_u, m_u): FMLS negates the product exactly")
	g.e(scvtf(13, 13), scvtf(14, 14), scvtf(7, 7))
	q4kD(g)
	g.e(fmlaE(0, 13, 1, 0), fmlaE(6, 14, 1, 0), fmlsE(5, 7, 1, 1))
	g.blockEnd(144, 292)
	g.hsum8(0, 6, 3)
	g.plusZero(1)
	g.comment("+ ((m0+m2)+(m1+m3))")
	g.e(ext16(3, 5, 5, 8), fadd(false, 5, 5, 3), faddp2(5, 5))
	g.op("FADDS F5, F0, F0")
	g.rowEnd()
}

// q6kAVX2 is DotQ6_KAVX2: 6-bit quants q-32 (ql nibble | 2 bits of qh),
// int8 scales per 16 values, eight lanes as DotQ4_KAVX2's, acc[t] =
// fma(dY·dW, lane t, acc[t]) (V0 lanes 0-3, V6 4-7), then 0 + hsum_float_8.
// Q6_K blocks: ql[128], qh[64] at 128, scales int8[16] at 192, d f16 at 208.
func q6kAVX2(g *gen, vr variant) {
	name := "q6kRows" + vr.suffix
	g.header(name, "DotQ6_KAVX2")
	g.e(movi16(2, 0x0f), movi16(15, 0x30), movi16(7, 32))
	g.rowStart()
	g.e(zero(0), zero(6))
	g.blockStart(210)
	g.comment("d = f32(dW)·dY; the scales as int16 (V9, V10), as words for SDOT (V11-V14)")
	g.op("MOVHU 208(R7), R12")
	g.op("FMOVS R12, F1")
	g.e(fcvtSH(1, 1))
	g.op("FMOVS (R8), F3")
	g.op("FMULS F3, F1, F1")
	g.op("ADD $192, R7, R10")
	g.op("VLD1 (R10), [V8.B16]")
	g.e(xtl(true, false, 0, 9, 8), xtl(true, true, 0, 10, 8))
	if vr.dot {
		g.e(xtl(true, false, 1, 11, 9), xtl(true, true, 1, 12, 9), xtl(true, false, 1, 13, 10), xtl(true, true, 1, 14, 10))
	}
	g.op("MOVD R7, R10")
	g.op("ADD $128, R7, R12")
	g.op("ADD $4, R8, R11")
	for half := 0; half < 2; half++ {
		g.op("VLD1.P 64(R10), [V20.B16, V21.B16, V22.B16, V23.B16]")
		g.op("VLD1.P 32(R12), [V24.B16, V25.B16]")
		for k := 0; k < 4; k++ {
			is := 8*half + 2*k
			g.comment(fmt.Sprintf("values %d..%d: scales %d, %d", 128*half+32*k, 128*half+32*k+31, is, is+1))
			qla, qlb := v(20+2*(k%2)), v(21+2*(k%2))
			if k < 2 {
				g.e(and16(26, qla, 2), and16(27, qlb, 2))
			} else {
				g.e(ushr16(26, qla, 4), ushr16(27, qlb, 4))
			}
			switch k {
			case 0, 1:
				g.e(shl16(28, 24, uint32(4-2*k)), shl16(29, 25, uint32(4-2*k)))
				g.e(and16(28, 28, 15), and16(29, 29, 15))
			case 2:
				g.e(and16(28, 24, 15), and16(29, 25, 15))
			case 3:
				g.e(ushr16(28, 24, 2), ushr16(29, 25, 2))
				g.e(and16(28, 28, 15), and16(29, 29, 15))
			}
			g.e(orr16(26, 26, 28), orr16(27, 27, 29), sub16(26, 26, 7), sub16(27, 27, 7))
			g.op("VLD1.P 32(R11), [V16.B16, V17.B16]")
			first := half == 0 && k == 0
			if vr.dot {
				g.e(zero(28), zero(29), sdot(28, 26, 16), sdot(29, 27, 17))
				if first {
					g.e(mulE(4, 28, v(11+is/4), is%4), mulE(5, 29, v(11+(is+1)/4), (is+1)%4))
				} else {
					g.e(mlaE(4, 28, v(11+is/4), is%4), mlaE(5, 29, v(11+(is+1)/4), (is+1)%4))
				}
				continue
			}
			// |q·y| ≤ 32·128, four of them fit int16
			g.e(smull(0, false, 28, 26, 16), smull(0, true, 29, 26, 16), smull(0, false, 30, 27, 17), smull(0, true, 31, 27, 17))
			g.e(addp(1, 28, 28, 29), addp(1, 30, 30, 31), addp(1, 28, 28, 30))
			if first {
				g.e(smullE(false, 4, 28, v(9+is/8), is%8), smullE(true, 5, 28, v(9+(is+1)/8), (is+1)%8))
			} else {
				g.e(smlalE(false, 4, 28, v(9+is/8), is%8), smlalE(true, 5, 28, v(9+(is+1)/8), (is+1)%8))
			}
		}
	}
	g.comment("acc[t] = fma(d, lane t, acc[t])")
	g.e(scvtf(4, 4), scvtf(5, 5), fmlaE(0, 4, 1, 0), fmlaE(6, 5, 1, 0))
	g.blockEnd(210, 292)
	g.hsum8(0, 6, 3)
	g.plusZero(1)
	g.rowEnd()
}

const head = "// Code generated by kernels/arm64/neon/gen; DO NOT EDIT.\n\n"

func main() {
	out := flag.String("out", "zz_neon_arm64.s", "assembly file to write")
	stubs := flag.String("stubs", "zz_stubs_arm64.go", "Go declarations to write")
	flag.Parse()
	var g gen
	g.b.WriteString(head + "//go:build arm64\n\n#include \"textflag.h\"\n")
	for _, vr := range variants {
		q80(&g, vr)
		q4kr8(&g, vr)
		q4kAVX2(&g, vr)
		q6kAVX2(&g, vr)
	}
	var s bytes.Buffer
	s.WriteString(head + "//go:build arm64\n\npackage neon\n")
	for _, k := range kernels {
		fmt.Fprintf(&s, "\n// %s is %s over rows weight rows (see gen).\n//\n//go:noescape\nfunc %s(nb int, w *byte, wstride int, x *byte, rows int, out *float32, pf int)\n", k.name, k.doc, k.name)
	}
	for path, b := range map[string][]byte{*out: g.b.Bytes(), *stubs: s.Bytes()} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
