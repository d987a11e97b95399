package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The q8_0 cache's loops (cpugen.AttentionSeqQ8_0's arithmetic):
//
//   - dotQ8: one Q8_0 query head (nb blocks of 32 int8 quants, a float32
//     scale each) against rows consecutive key rows of a q8_0 cache (int8
//     quants stride bytes apart, f16 scales stride/32 apart). Per row and
//     block the integer sum Σ q·k is exact (any order); the float side is
//     the kernel's: dot = 0, then for each block in order
//     dot += float32(qd·ks)·float32(isum), each product and sum rounded to
//     float32. The rows are the SIMD lanes (16 a zmm, 8 a ymm), so the
//     float side runs as written, one lane per row; the integer sums are
//     made per row and block, then moved into row lanes by an unpack/shuffle
//     tree whose adds are exact.
//   - accQ8: for r < rows, acc = acc·ms[r] where ms[r] ≠ 1, then
//     acc[d] = fma(float32(v[d])·vd, w[r], acc[d]) (v[d]·vd is exact: 8 by
//     11 significant bits), one rounding, as quant.FMA32.
//
// AVX-512 (VNNI): VPDPBUSD multiplies unsigned by signed bytes, so the key
// is biased, k+128 = k XOR 0x80, and the block's 128·Σq taken off after
// the tree: exact for every int8, -128 included. AVX2: VPMOVSXBW and
// VPMADDWD (VPMADDUBSW would saturate on -128), exact alike.

// q8MaxBlocks bounds the head's blocks (the AVX-512 dot keeps each
// block's 128·Σq in its frame): heads up to 1024 values.
const q8MaxBlocks = 32

var c80, iota16, shufW Mem

func q8Data() {
	c80 = GLOBL("c80", RODATA|NOPTR)
	DATA(0, U32(0x80808080))
	iota16 = GLOBL("iota16", RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		DATA(4*i, U32(i))
	}
	// per 128-bit lane: the low words of the four dwords, then the high words
	shufW = GLOBL("shufw", RODATA|NOPTR)
	for l := 0; l < 2; l++ {
		for i, b := range []byte{0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15} {
			DATA(16*l+i, U8(b))
		}
	}
}

// q8Regs are the GP registers a dot keeps.
type q8Regs struct {
	qq, qd, kq, ks, st, st3, rows, out, bo, kspp, kpp, g Register
}

// row is the address of row 4k+i of a group whose first row is at g.
func (r q8Regs) row(i, disp int) Mem {
	switch i {
	case 0:
		return Mem{Base: r.g, Disp: disp}
	case 1:
		return Mem{Base: r.g, Index: r.st, Scale: 1, Disp: disp}
	case 2:
		return Mem{Base: r.g, Index: r.st, Scale: 2, Disp: disp}
	}
	return Mem{Base: r.g, Index: r.st3, Scale: 1, Disp: disp}
}

// group4 points g at the first row of group k (of four rows) of the block
// whose key quants start at kpp.
func (r q8Regs) group4(k int) {
	if k == 0 {
		MOVQ(r.kpp, r.g)
	} else {
		LEAQ(Mem{Base: r.g, Index: r.st, Scale: 4}, r.g)
	}
}

// tree4 moves the dword sums of four inputs a[0..3] into one register: in
// each 128-bit chunk j of the result, lane i is the sum of chunk j of
// a[i]. The a are clobbered; t is a temporary.
func tree4(a [4]VecPhysical, t, dst VecPhysical) {
	VPUNPCKLDQ(a[1], a[0], t)
	VPUNPCKHDQ(a[1], a[0], a[0])
	VPADDD(t, a[0], a[0]) // per chunk [a0+a2, b0+b2, a1+a3, b1+b3]
	VPUNPCKLDQ(a[3], a[2], t)
	VPUNPCKHDQ(a[3], a[2], a[2])
	VPADDD(t, a[2], a[2])
	VPUNPCKLQDQ(a[2], a[0], t)
	VPUNPCKHQDQ(a[2], a[0], a[0])
	VPADDD(t, a[0], dst)
}

// hsum8 leaves in lane 0 of x the sum of the eight dwords of the ymm y
// (x being its low half); t is a temporary.
func hsum8(y, x, t VecPhysical) {
	VEXTRACTI128(U8(1), y, t.(Vec).AsX())
	VPADDD(t.(Vec).AsX(), x, x)
	VPSHUFD(U8(0x4e), x, t.(Vec).AsX())
	VPADDD(t.(Vec).AsX(), x, x)
	VPSHUFD(U8(0xb1), x, t.(Vec).AsX())
	VPADDD(t.(Vec).AsX(), x, x)
}

// q8Tail is the one-row loop both dots finish with: for each remaining
// row, the blocks' exact sums by VPMOVSXBW/VPMADDWD and the float side in
// scalar, the kernel's order. Uses X/Y0-15 only (VEX).
func q8Tail(name string, r q8Regs, nb4 Mem) {
	Label(name + "_tail")
	TESTQ(r.rows, r.rows)
	JZ(LabelRef(name + "_done"))
	t := GP32()
	Label(name + "_trow")
	VXORPS(X11, X11, X11)
	XORQ(r.bo, r.bo)
	MOVQ(r.ks, r.kspp)
	Label(name + "_tblk")
	VPMOVSXBW(Mem{Base: r.kq, Index: r.bo, Scale: 8}, Y4)
	VPMOVSXBW(Mem{Base: r.kq, Index: r.bo, Scale: 8, Disp: 16}, Y5)
	VPMOVSXBW(Mem{Base: r.qq, Index: r.bo, Scale: 8}, Y12)
	VPMOVSXBW(Mem{Base: r.qq, Index: r.bo, Scale: 8, Disp: 16}, Y13)
	VPMADDWD(Y12, Y4, Y4)
	VPMADDWD(Y13, Y5, Y5)
	VPADDD(Y5, Y4, Y4)
	hsum8(Y4, X4, Y5)
	VCVTDQ2PS(X4, X4)
	MOVWLZX(Mem{Base: r.kspp}, t)
	VMOVD(t, X5)
	VCVTPH2PS(X5, X5)
	VMULSS(Mem{Base: r.qd, Index: r.bo, Scale: 1}, X5, X5) // dd = qd·ks
	VMULSS(X5, X4, X4)                                     // dd·isum
	VADDSS(X4, X11, X11)
	ADDQ(U8(2), r.kspp)
	ADDQ(U8(4), r.bo)
	CMPQ(r.bo, nb4)
	JB(LabelRef(name + "_tblk"))
	VMOVSS(X11, Mem{Base: r.out})
	ADDQ(U8(4), r.out)
	ADDQ(r.st, r.kq)
	MOVQ(r.st, r.g)
	SHRQ(U8(4), r.g) // a row's scales: stride/32 words
	ADDQ(r.g, r.ks)
	DECQ(r.rows)
	JNZ(LabelRef(name + "_trow"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

func q8Prologue(name string) (q8Regs, Mem, Mem) {
	TEXT(name, NOSPLIT, "func(nb int, qq *byte, qd *float32, kq *byte, ks *uint16, stride int, rows int, out *float32)")
	Pragma("noescape")
	var r q8Regs
	r.qq, r.qd, r.kq, r.ks = Load(Param("qq"), GP64()), Load(Param("qd"), GP64()), Load(Param("kq"), GP64()), Load(Param("ks"), GP64())
	r.st, r.rows, r.out = Load(Param("stride"), GP64()), Load(Param("rows"), GP64()), Load(Param("out"), GP64())
	r.st3, r.bo, r.kspp, r.kpp, r.g = GP64(), GP64(), GP64(), GP64(), GP64()
	lim, nb4 := AllocLocal(8), AllocLocal(8)
	nb := Load(Param("nb"), r.g)
	SHLQ(U8(2), nb)
	MOVQ(nb, nb4)
	ANDQ(I8(-8), nb) // the pairs' end: 4·(nb &^ 1)
	MOVQ(nb, lim)
	LEAQ(Mem{Base: r.st, Index: r.st, Scale: 2}, r.st3)
	return r, lim, nb4
}

// genDotQ8AVX512 is the AVX-512 VNNI dot: 16 rows a pass, two blocks (a
// zmm of each row) a step.
func genDotQ8AVX512() {
	name := "dotQ8AVX512"
	r, lim, nb4 := q8Prologue(name)
	Doc(fmt.Sprintf("%s: out[r] = the Q8_0 dot of the query (nb blocks: quants qq, scales qd) and key row r (quants kq[r·stride:], f16 scales ks[r·stride/32:]), for r < rows, in cpugen.AttentionSeqQ8_0's order (AVX-512 VNNI).", name))
	corr := AllocLocal(4 * q8MaxBlocks) // per block 128·Σq, the bias VPDPBUSD's unsigned keys add
	VPBROADCASTD(c80, Z16)
	// the corrections
	XORQ(r.bo, r.bo)
	Label(name + "_corr")
	VPXOR(Y4, Y4, Y4)
	VPDPBUSD(Mem{Base: r.qq, Index: r.bo, Scale: 8}, Y16, Y4) // Σ 128·q
	hsum8(Y4, X4, Y5)
	VMOVD(X4, corr.Idx(r.bo, 1))
	ADDQ(U8(4), r.bo)
	CMPQ(r.bo, nb4)
	JB(LabelRef(name + "_corr"))
	// gather indices: row i's scales at ks + 2·i·(stride/32)
	MOVQ(r.st, r.g)
	SHRQ(U8(5), r.g)
	VPBROADCASTD(r.g.(GP).As32(), Z19)
	VPMULLD(iota16, Z19, Z19)

	in := [4]VecPhysical{Z0, Z1, Z2, Z3}
	acc := [4]VecPhysical{Z4, Z5, Z6, Z7}
	V := [4]VecPhysical{Z10, Z11, Z12, Z13}
	q, t, t2 := Z9, Z8, Z23
	dot, idx, gth := Z18, Z19, Z20
	// float side of block c (its sums in x, lanes rows) with the scales'
	// dwords in gth: the low words (hi false) or the high ones
	float := func(x VecPhysical, disp int, hi bool) {
		if hi {
			VPSRLD(U8(16), gth, Z21)
			VPMOVDW(Z21, Y21)
		} else {
			VPMOVDW(gth, Y21)
		}
		VCVTPH2PS(Y21, Z21)
		VBROADCASTSS(Mem{Base: r.qd, Index: r.bo, Scale: 1, Disp: disp}, Z22)
		VMULPS(Z22, Z21, Z21) // dd = qd·ks
		VPBROADCASTD(corr.Idx(r.bo, 1).Offset(disp), Z22)
		VPSUBD(Z22, x, x) // the exact isum
		VCVTDQ2PS(x, x)
		VMULPS(x, Z21, x) // dd·isum
		VADDPS(x, dot, dot)
	}
	// sums: 16 rows of one block pair (half: one block, ymm loads) into
	// x0 (block c) and x1 (block c+1) with the rows as lanes
	sums := func(half bool, x0, x1 VecPhysical) {
		LEAQ(Mem{Base: r.kq, Index: r.bo, Scale: 8}, r.kpp)
		qm := Mem{Base: r.qq, Index: r.bo, Scale: 8}
		if half {
			VMOVDQU64(qm, q.(Vec).AsY())
		} else {
			VMOVDQU64(qm, q)
		}
		for k := 0; k < 4; k++ {
			r.group4(k)
			for i := 0; i < 4; i++ {
				if half {
					VPXORD(r.row(i, 0), Y16, in[i].(Vec).AsY())
				} else {
					VPXORD(r.row(i, 0), Z16, in[i])
				}
				VPXORD(acc[i], acc[i], acc[i])
				if half {
					VPDPBUSD(q.(Vec).AsY(), in[i].(Vec).AsY(), acc[i].(Vec).AsY())
				} else {
					VPDPBUSD(q, in[i], acc[i])
				}
			}
			tree4(acc, t, V[k])
		}
		// V[k] chunk j lane i: chunk j of row 4k+i; a block is two chunks
		VSHUFI64X2(U8(0x88), V[1], V[0], t)
		VSHUFI64X2(U8(0xdd), V[1], V[0], t2)
		VPADDD(t2, t, V[0]) // chunk 0: block c of rows 0-3, 1: c+1 of 0-3, 2: c of 4-7, 3: c+1 of 4-7
		VSHUFI64X2(U8(0x88), V[3], V[2], t)
		VSHUFI64X2(U8(0xdd), V[3], V[2], t2)
		VPADDD(t2, t, V[2]) // the same for rows 8-15
		VSHUFI64X2(U8(0x88), V[2], V[0], x0)
		if !half {
			VSHUFI64X2(U8(0xdd), V[2], V[0], x1)
		}
	}
	Label(name + "_chunk")
	CMPQ(r.rows, U8(16))
	JB(LabelRef(name + "_tail"))
	VPXORD(dot, dot, dot)
	XORQ(r.bo, r.bo)
	MOVQ(r.ks, r.kspp)
	CMPQ(r.bo, lim)
	JAE(LabelRef(name + "_half"))
	Label(name + "_pair")
	sums(false, Z14, Z15)
	KXNORW(K1, K1, K1)
	VPGATHERDD(Mem{Base: r.kspp, Index: idx, Scale: 2}, K1, gth) // scale words c, c+1 of each row
	float(Z14, 0, false)
	float(Z15, 4, true)
	ADDQ(U8(4), r.kspp)
	ADDQ(U8(8), r.bo)
	CMPQ(r.bo, lim)
	JB(LabelRef(name + "_pair"))
	Label(name + "_half")
	CMPQ(r.bo, nb4)
	JAE(LabelRef(name + "_store"))
	sums(true, Z14, Z15)
	KXNORW(K1, K1, K1)
	VPGATHERDD(Mem{Base: r.kspp, Index: idx, Scale: 2, Disp: -2}, K1, gth) // words c-1, c
	float(Z14, 0, true)
	Label(name + "_store")
	VMOVUPS(dot, Mem{Base: r.out})
	ADDQ(U8(64), r.out)
	MOVQ(r.st, r.g)
	SHLQ(U8(4), r.g)
	ADDQ(r.g, r.kq) // 16 rows on
	ADDQ(r.st, r.ks)
	SUBQ(U8(16), r.rows)
	JMP(LabelRef(name + "_chunk"))
	q8Tail(name, r, nb4)
}

// genDotQ8AVX2 is the AVX2 dot: 8 rows a pass, one block a step, the
// scales gathered for two blocks at once.
func genDotQ8AVX2() {
	name := "dotQ8AVX2"
	r, lim, nb4 := q8Prologue(name)
	Doc(fmt.Sprintf("%s: out[r] = the Q8_0 dot of the query (nb blocks: quants qq, scales qd) and key row r (quants kq[r·stride:], f16 scales ks[r·stride/32:]), for r < rows, in cpugen.AttentionSeqQ8_0's order (AVX2).", name))
	in := [4]VecPhysical{Y0, Y1, Y2, Y3}
	dot, idx, gth, words := Y11, Y10, Y8, Y14
	MOVQ(r.st, r.g)
	SHRQ(U8(5), r.g)
	VMOVD(r.g.(GP).As32(), idx.(Vec).AsX())
	VPBROADCASTD(idx.(Vec).AsX(), idx)
	VPMULLD(iota16, idx, idx)
	// one block (at disp bytes into the pair) of 8 rows into Y4, rows as
	// lanes, then its float side; hi: the scales' high words
	block := func(disp int, hi bool) {
		LEAQ(Mem{Base: r.kq, Index: r.bo, Scale: 8, Disp: disp}, r.kpp)
		VPMOVSXBW(Mem{Base: r.qq, Index: r.bo, Scale: 8, Disp: disp}, Y12)
		VPMOVSXBW(Mem{Base: r.qq, Index: r.bo, Scale: 8, Disp: disp + 16}, Y13)
		for k := 0; k < 2; k++ {
			r.group4(k)
			for i := 0; i < 4; i++ {
				VPMOVSXBW(r.row(i, 0), Y4)
				VPMOVSXBW(r.row(i, 16), Y5)
				VPMADDWD(Y12, Y4, Y4)
				VPMADDWD(Y13, Y5, Y5)
				VPADDD(Y5, Y4, in[i])
			}
			tree4(in, Y4, []VecPhysical{Y6, Y7}[k])
		}
		VPERM2I128(U8(0x20), Y7, Y6, Y4)
		VPERM2I128(U8(0x31), Y7, Y6, Y5)
		VPADDD(Y5, Y4, Y4) // lane i: row i's block sum
		if hi {
			VEXTRACTI128(U8(1), words, X15)
			VCVTPH2PS(X15, Y15)
		} else {
			VCVTPH2PS(words.(Vec).AsX(), Y15)
		}
		VBROADCASTSS(Mem{Base: r.qd, Index: r.bo, Scale: 1, Disp: disp / 8}, Y0)
		VMULPS(Y0, Y15, Y15) // dd = qd·ks
		VCVTDQ2PS(Y4, Y4)
		VMULPS(Y4, Y15, Y4) // dd·isum
		VADDPS(Y4, dot, dot)
	}
	gather := func(disp int) {
		VPCMPEQD(Y9, Y9, Y9)
		VPGATHERDD(Y9, Mem{Base: r.kspp, Index: idx, Scale: 2, Disp: disp}, gth)
		VPSHUFB(shufW, gth, words)
		VPERMQ(U8(0xd8), words, words) // low xmm: low words of the 8 rows, high xmm: high words
	}
	Label(name + "_chunk")
	CMPQ(r.rows, U8(8))
	JB(LabelRef(name + "_tail"))
	VXORPS(dot, dot, dot)
	XORQ(r.bo, r.bo)
	MOVQ(r.ks, r.kspp)
	CMPQ(r.bo, lim)
	JAE(LabelRef(name + "_half"))
	Label(name + "_pair")
	gather(0)
	block(0, false)
	block(32, true)
	ADDQ(U8(4), r.kspp)
	ADDQ(U8(8), r.bo)
	CMPQ(r.bo, lim)
	JB(LabelRef(name + "_pair"))
	Label(name + "_half")
	CMPQ(r.bo, nb4)
	JAE(LabelRef(name + "_store"))
	gather(-2) // words c-1, c
	block(0, true)
	Label(name + "_store")
	VMOVUPS(dot, Mem{Base: r.out})
	ADDQ(U8(32), r.out)
	LEAQ(Mem{Base: r.kq, Index: r.st, Scale: 8}, r.kq) // 8 rows on
	MOVQ(r.st, r.g)
	SHRQ(U8(1), r.g)
	ADDQ(r.g, r.ks)
	SUBQ(U8(8), r.rows)
	JMP(LabelRef(name + "_chunk"))
	q8Tail(name, r, nb4)
}

// genAccQ8: for r < rows, acc (nv·lanes values) = acc·ms[r] where
// ms[r] ≠ 1, then acc = fma(v row r · its block's scale, w[r], acc). The
// columns are independent: blocks of registers run down all the rows.
func genAccQ8(s isa) {
	name := "accQ8" + s.name
	TEXT(name, NOSPLIT, "func(nv int, acc *float32, vq *byte, vd *uint16, stride int, rows int, w *float32, ms *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s: for r < rows, acc (nv·%d values) = acc·ms[r] where ms[r] ≠ 1, then acc = fma(int8 row vq[r·stride:] · its f16 block scales vd[r·stride/32:], w[r], acc) (%s).", name, s.lanes, s.name))
	nv, acc, v, vd, vst, rows, w, ms := Load(Param("nv"), GP64()), Load(Param("acc"), GP64()), Load(Param("vq"), GP64()), Load(Param("vd"), GP64()), Load(Param("stride"), GP64()), Load(Param("rows"), GP64()), Load(Param("w"), GP64()), Load(Param("ms"), GP64())
	dst := GP64()
	MOVQ(vst, dst)
	SHRQ(U8(4), dst) // a row's scale bytes
	TESTQ(rows, rows)
	JZ(LabelRef(name + "_done"))
	vp, dp, r := GP64(), GP64(), GP64()
	var mreg, sreg VecPhysical
	a := func(i int) VecPhysical { return s.reg(i) }
	var t, sc func(i int) VecPhysical
	if s.lanes == 16 {
		mreg, sreg = Z13, Z14
		t = func(i int) VecPhysical { return zr[16+i] }
		sc = func(b int) VecPhysical { return zr[24+b] }
	} else {
		mreg, sreg = Y15, Y14
		t = func(i int) VecPhysical { return yr[8+i%4] }
		sc = func(b int) VecPhysical { return yr[12+b] }
	}
	block := func(nb int) {
		l := fmt.Sprintf("%s_b%d", name, nb)
		nq := nb * s.lanes / 32 // q8 blocks
		for i := 0; i < nb; i++ {
			VMOVUPS(Mem{Base: acc, Disp: 4 * s.lanes * i}, a(i))
		}
		MOVQ(v, vp)
		MOVQ(vd, dp)
		XORQ(r, r)
		Label(l + "_row")
		VBROADCASTSS(Mem{Base: ms, Index: r, Scale: 4}, mreg)
		VUCOMISS(one, mreg.(Vec).AsX())
		JNE(LabelRef(l + "_rescale"))
		JP(LabelRef(l + "_rescale"))
		Label(l + "_fma")
		VBROADCASTSS(Mem{Base: w, Index: r, Scale: 4}, sreg)
		for b := 0; b < nq; b++ {
			h := sc(b).(Vec).AsX()
			if s.lanes == 16 {
				h = sc(b).(Vec).AsY()
			}
			VPBROADCASTW(Mem{Base: dp, Disp: 2 * b}, h)
			VCVTPH2PS(h, sc(b))
		}
		for i := 0; i < nb; i++ {
			VPMOVSXBD(Mem{Base: vp, Disp: s.lanes * i}, t(i))
			VCVTDQ2PS(t(i), t(i))
			VMULPS(sc(i*s.lanes/32), t(i), t(i)) // exact
			VFMADD231PS(sreg, t(i), a(i))
		}
		ADDQ(vst, vp)
		ADDQ(dst, dp)
		INCQ(r)
		CMPQ(r, rows)
		JB(LabelRef(l + "_row"))
		for i := 0; i < nb; i++ {
			VMOVUPS(a(i), Mem{Base: acc, Disp: 4 * s.lanes * i})
		}
		JMP(LabelRef(l + "_next"))
		Label(l + "_rescale")
		for i := 0; i < nb; i++ {
			VMULPS(mreg, a(i), a(i))
		}
		JMP(LabelRef(l + "_fma"))
		Label(l + "_next")
		ADDQ(U32(4*s.lanes*nb), acc)
		ADDQ(U32(s.lanes*nb), v)
		ADDQ(U8(nq*2), vd)
		SUBQ(U8(nb), nv)
	}
	sizes := []int{8, 4}
	if s.lanes == 16 {
		sizes = []int{8, 4, 2}
	}
	for j, nb := range sizes {
		l := fmt.Sprintf("%s_loop%d", name, nb)
		Label(l)
		CMPQ(nv, U8(nb))
		if j+1 < len(sizes) {
			JB(LabelRef(fmt.Sprintf("%s_loop%d", name, sizes[j+1])))
		} else {
			JB(LabelRef(name + "_done"))
		}
		block(nb)
		JMP(LabelRef(l))
	}
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
