// Command gen writes the amd64 assembly of package legacy with avo:
//
//	go run ./gen -out zz_legacy_amd64.s -stubs zz_stubs_amd64.go -pkg legacy
//
// Every kernel reproduces one order bit for bit (a kernels/cpugen function,
// or legacy.DotMXFP4AVX2), so the integer parts may be computed any exact
// way (VPMADDWD, VPMADDUBSW, VPDPBUSD with a bias correction) while every
// float operation is the one the order names, in its order: per block and
// lane one FMA by the rounded scale product dW·dX, then the order's
// horizontal tree, then cpugen's "0 + sum". (The FMAs round once, as the
// hardware's; see model_test.go for where cpugen's float64 FMA does not.)
//
// Registers are physical and chosen by hand: the AVX2 and AVX-VNNI kernels
// use only X/Y0-15 (VEX; AVX-VNNI's VPDPBUSD as bytes, which Go's assembler
// encodes only as EVEX), the AVX-512 ones put accumulators in the low registers and
// operands in 16-31 so that each instruction has an encoding for them.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"

	"github.com/jitllm/jitllm/kernels/amd64/internal/vexvnni"
)

const (
	tileSig = "func(nb int, w *byte, wstride int, x *byte, xstride int, out *float32, ostride int)"
	dotSig  = "func(nb int, w *byte, x *byte) float32"
)

var (
	xr = [32]VecPhysical{X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15,
		X16, X17, X18, X19, X20, X21, X22, X23, X24, X25, X26, X27, X28, X29, X30, X31}
	yr = [32]VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15,
		Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23, Y24, Y25, Y26, Y27, Y28, Y29, Y30, Y31}
	zr = [32]VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
		Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
	// row pointers: weight rows, activation rows
	wpr = []GPPhysical{RSI, R8, R9, R10}
	xpr = []GPPhysical{RDI, R11, R12, R13}
)

var shr4hi, perm8, nib0f, mxfp4Biased, e8m0Half Mem

func main() {
	ConstraintExpr("amd64")

	// per-qword shift counts: the low 128 bits keep the low nibbles, the
	// high 128 bits (the same 16 bytes, broadcast) get the high nibbles
	shr4hi = GLOBL("shr4hi", RODATA|NOPTR)
	for i, v := range []uint64{0, 0, 4, 4} {
		DATA(8*i, U64(v))
	}
	// dword order that undoes VPACKUS*'s per-128-bit-lane interleave
	perm8 = GLOBL("perm8", RODATA|NOPTR)
	for i, v := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
		DATA(4*i, U32(v))
	}

	nib0f = GLOBL("nib0f", RODATA|NOPTR)
	for i := 0; i < 4; i++ {
		DATA(8*i, U64(0x0f0f0f0f0f0f0f0f))
	}
	// MXFP4's doubled E2M1 values plus 12: a VPSHUFB table of unsigned bytes
	mxfp4Biased = GLOBL("mxfp4biased", RODATA|NOPTR)
	for i, v := range []int{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12} {
		DATA(i, U8(v+12))
	}
	// GGML_E8M0_TO_FP32_HALF for every exponent byte, as float32 bits
	e8m0Half = GLOBL("e8m0half", RODATA|NOPTR)
	for e := 0; e < 256; e++ {
		bits := uint32(e-1) << 23
		if e < 2 {
			bits = 0x00200000 << e
		}
		DATA(4*e, U32(bits))
	}

	for _, q := range []qkern{
		{name: "q80AVX2", kind: kQ80, evex: false},
		{name: "q40AVX2", kind: kQ40, evex: false},
		{name: "q40RepackAVX2", kind: kRepack, evex: false},
		{name: "q80VNNI", kind: kQ80, evex: true},
		{name: "q40VNNI", kind: kQ40, evex: true},
		{name: "q40RepackVNNI", kind: kRepack, evex: true},
		{name: "mxfp4AVX2", kind: kMXFP4, evex: false},
		{name: "mxfp4VNNI", kind: kMXFP4, evex: true},
		// AVX-VNNI without AVX-512: the AVX2 shapes and registers, VPDPBUSD as VEX bytes
		{name: "q80AVXVNNI", kind: kQ80, vex: true},
		{name: "q40AVXVNNI", kind: kQ40, vex: true},
		{name: "q40RepackAVXVNNI", kind: kRepack, vex: true},
		// (no MXFP4: its 2×1 AVX-VNNI tile measured 0.77-0.82× the AVX2 one,
		// the per-block bias correction on the one activation row's critical path)
	} {
		w, x := 2, 2
		switch {
		case q.kind == kMXFP4 && q.evex:
			w, x = 4, 2
		case q.kind == kMXFP4:
			w, x = 2, 1
		case q.evex:
			w, x = 4, 4
		}
		q.gen(q.name+"Dot", 1, 1, true)
		if q.kind == kQ80 && q.evex {
			q80WideTile(q.name + "Tile4x4")
			q80WideTile8x4(q.name + "Tile8x4")
		} else {
			q.gen(fmt.Sprintf("%sTile%dx%d", q.name, w, x), w, x, false)
		}
		// a decode tile: one activation row against 4 weight rows, 4
		// independent FMA chains where a Dot has one (AVX2 MXFP4's two
		// accumulators per output leave no room)
		if q.evex || q.kind != kMXFP4 {
			q.gen(q.name+"Tile4x1", 4, 1, false)
		}
	}
	for _, f := range []fkern{
		{name: "f32AVX512", f16: false, groups: 4},
		{name: "f32TinyBLAS", f16: false, groups: 1},
		{name: "f16AVX512", f16: true, groups: 4},
		{name: "f16TinyBLAS", f16: true, groups: 1},
	} {
		w, x := 2, 3
		if f.groups == 1 {
			w, x = 4, 4
		}
		f.gen(f.name+"Dot", 1, 1, true)
		f.gen(fmt.Sprintf("%sTile%dx%d", f.name, w, x), w, x, false)
		// the same orders with ymm pairs: a 4-accumulator order fills the 16
		// registers with one output, tinyBLAS's takes a 2×2 tile
		a := f
		a.avx2, a.name = true, f.name+"OnAVX2"
		a.gen(a.name+"Dot", 1, 1, true)
		if f.groups == 1 {
			a.gen(a.name+"Tile2x2", 2, 2, false)
		}
	}
	qkern{name: "q80VNNI", kind: kQ80, evex: true}.rowsBody("q80VNNIRows")
	quantQ80()
	Generate()
}

// m is the byte at base+idx+disp.
func m(base, idx Register, disp int) Mem { return Mem{Base: base, Index: idx, Scale: 1, Disp: disp} }

// bcast32 fills vector v with the 32-bit constant c (through AX).
func bcast32(c uint32, v VecPhysical, xv VecPhysical) {
	MOVL(U32(c), EAX)
	VMOVD(EAX, xv)
	VPBROADCASTD(xv, v)
}

// zero clears a vector register (EVEX form for 16-31).
func zero(v VecPhysical, evex bool) {
	if evex {
		VPXORD(v, v, v)
	} else {
		VPXOR(v, v, v)
	}
}

// tileStart loads a quant kernel's row pointers (one of each without a
// tile), nb into RCX, and zeroes the weight and activation block offsets
// (RBX, RDX).
func tileStart(W, X int, dot bool) (wp, xp []GPPhysical, woff, xoff GPPhysical) {
	wp, xp = wpr[:W], xpr[:X]
	if dot {
		Load(Param("w"), wp[0])
		Load(Param("x"), xp[0])
	} else {
		rowPointers("w", "wstride", wp, RAX)
		rowPointers("x", "xstride", xp, RAX)
	}
	Load(Param("nb"), RCX)
	woff, xoff = RBX, RDX
	XORQ(woff, woff)
	XORQ(xoff, xoff)
	return wp, xp, woff, xoff
}

// rowPointers loads the tile's row pointers (row r = base + r*stride).
func rowPointers(ptr, stride string, rows []GPPhysical, tmp GPPhysical) {
	Load(Param(ptr), rows[0])
	if len(rows) == 1 {
		return
	}
	Load(Param(stride), tmp)
	for r := 1; r < len(rows); r++ {
		MOVQ(rows[r-1], rows[r])
		ADDQ(tmp, rows[r])
	}
}

// storeOut writes the tile's results (in res(i, j), lane 0) to out.
func storeOut(W, X int, dot bool, res func(i, j int) VecPhysical) {
	if dot {
		Store(res(0, 0), ReturnIndex(0))
		return
	}
	Load(Param("out"), RAX)
	Load(Param("ostride"), RBX)
	SHLQ(U8(2), RBX)
	for i := 0; i < X; i++ {
		for j := 0; j < W; j++ {
			VMOVSS(res(i, j), Mem{Base: RAX, Disp: 4 * j})
		}
		if i+1 < X {
			ADDQ(RBX, RAX)
		}
	}
}

type qkind int

const (
	kQ80    qkind = iota // Q8_0 × Q8_0, 8 lanes
	kQ40                 // Q4_0 × Q8_0, 8 lanes
	kRepack              // Q4_0 × Q8_0, one sum per block
	kMXFP4               // MXFP4 × Q8_0, 8 lanes in two accumulators (even, odd blocks)
)

type qkern struct {
	name string
	kind qkind
	evex bool // AVX-512 VNNI (VPDPBUSD, registers 16-31)
	vex  bool // AVX-VNNI (VPDPBUSD in its VEX form, registers 0-15)
}

// dp reports whether the integer part is VPDPBUSD with a bias correction.
func (q qkern) dp() bool { return q.evex || q.vex }

// dpbusd is acc += Σ4 a·b (a unsigned, b signed bytes) in q's encoding.
func (q qkern) dpbusd(b, a, acc VecPhysical) {
	if q.vex {
		vexvnni.VPDPBUSD(b, a, acc)
		return
	}
	VPDPBUSD(b, a, acc)
}

// qregs is a quant kernel's register plan.
type qregs struct {
	wq, wq2, dw   [4]VecPhysical // weight quants (Q8_0 AVX2: two sign-extended halves), scales
	ya, ya2       VecPhysical    // activation quants (Q8_0 AVX2: two halves)
	corr, dx      VecPhysical    // activation-only correction term, scale
	t, d          VecPhysical    // temporaries
	c1, c2, table VecPhysical    // constants

	// the repack order's tiles: the W pairs of an activation row summed
	// together, one lane per weight row
	vrep     bool
	vt       [4]VecPhysical // each pair's int32 lanes
	dwv, ext VecPhysical    // the W weight scales as lanes; a temporary
}

func (q qkern) wbytes() int {
	switch q.kind {
	case kQ80:
		return 34
	case kMXFP4:
		return 17
	}
	return 18
}

// accs is the number of accumulators per output.
func (q qkern) accs() int {
	if q.kind == kMXFP4 {
		return 2
	}
	return 1
}

func (q qkern) regs() qregs {
	var r qregs
	if q.evex {
		for j := 0; j < 4; j++ {
			r.wq[j], r.dw[j] = yr[16+j], yr[20+j]
		}
		r.ya, r.corr, r.dx, r.t, r.d, r.c1, r.c2, r.table = Y24, Y25, Y26, Y27, Y28, Y29, Y30, Y31
		return r
	}
	if q.kind == kQ80 && !q.vex {
		for j := 0; j < 2; j++ {
			r.wq[j], r.wq2[j], r.dw[j] = yr[4+2*j], yr[5+2*j], yr[8+j]
		}
		r.ya, r.ya2, r.dx, r.t, r.d = Y10, Y11, Y12, Y13, Y14
		return r
	}
	for j := 0; j < 2; j++ {
		r.wq[j], r.dw[j] = yr[4+j], yr[6+j]
	}
	r.ya, r.corr, r.dx, r.t, r.d, r.c1, r.c2, r.table = Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15
	return r
}

// gen writes one quant tile kernel: W weight rows × X activation rows,
// accumulator (i, j, h) in Y((i*W+j)*accs+h).
// prefetchDist is how far ahead the one-activation-row kernels prefetch
// weights (as kernels/amd64/kquant's).
const prefetchDist = 2048

func (q qkern) gen(name string, W, X int, dot bool) {
	if dot {
		TEXT(name, NOSPLIT, dotSig)
	} else {
		TEXT(name, NOSPLIT, tileSig)
	}
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is %d weight rows × %d Q8_0 rows of nb blocks (%s).", name, W, X, q.describe()))
	wp, xp, woff, xoff := tileStart(W, X, dot)

	na := q.accs()
	acc := func(i, j, h int) VecPhysical { return yr[(i*W+j)*na+h] }
	if q.kind == kRepack && W > 1 {
		acc = func(i, j, h int) VecPhysical { return yr[i] } // lane j of row i's
	}
	for i := 0; i < X; i++ {
		for j := 0; j < W; j++ {
			for h := 0; h < na; h++ {
				zero(acc(i, j, h), false)
			}
		}
	}
	r := q.regs()
	if q.kind == kRepack && W > 1 {
		if W != 2 && W != 4 {
			panic("repack tiles are 2 or 4 weight rows wide")
		}
		r.vrep = true
		if q.evex {
			r.vt, r.dwv, r.ext = [4]VecPhysical{Y4, Y5, Y6, Y7}, Y9, Y8
		} else {
			// free in this plan: Y1-3 (one accumulator per activation row,
			// at most two rows), and the dw slots Y6, Y7
			r.vt, r.dwv, r.ext = [4]VecPhysical{Y2, Y3, Y7, Y1}, Y6, r.t
		}
		zero(r.dwv, q.evex) // unused lanes stay 0, not stale (denormal) bits
	}
	switch {
	case q.dp() && q.kind == kQ80:
		bcast32(0x80808080, r.c1, xr[r.c1.PhysicalIndex()])
	case q.dp():
		c := uint32(0x08080808)
		if q.kind == kMXFP4 {
			c = 0x0c0c0c0c
		}
		bcast32(c, r.c1, xr[r.c1.PhysicalIndex()])
		bcast32(0x0f0f0f0f, r.c2, xr[r.c2.PhysicalIndex()])
	case q.kind != kQ80:
		bcast32(0x00010001, r.c1, xr[r.c1.PhysicalIndex()])
		c := uint32(0x08080808)
		if q.kind == kMXFP4 {
			c = 0x0c0c0c0c
		}
		bcast32(c, r.c2, xr[r.c2.PhysicalIndex()])
		if q.kind != kMXFP4 {
			bcast32(0x0f0f0f0f, r.table, xr[r.table.PhysicalIndex()]) // the nibble mask
		}
	}
	if q.kind == kMXFP4 {
		// R13 (free: MXFP4 tiles have at most two activation rows) holds the
		// scale table, which cannot be indexed off SB
		LEAQ(e8m0Half, R13)
		if q.evex {
			VBROADCASTI32X4(mxfp4Biased, r.table)
		} else {
			VBROADCASTI128(mxfp4Biased, r.table)
		}
	}

	wb := q.wbytes()
	loop, done := name+"_loop", name+"_done"
	if q.kind == kMXFP4 {
		SHRQ(U8(1), RCX) // block pairs
	}
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	Label(loop)
	if X == 1 {
		// One activation row (decode): each weight byte comes from DRAM
		// once, and a row is too short for the hardware prefetcher to
		// ramp up on; fetch the lines prefetchDist ahead (past a row's
		// end that is the next row; a prefetch never faults).
		for _, p := range wp {
			for o := 0; o < na*wb; o += 64 {
				PREFETCHT0(Mem{Base: p, Index: woff, Scale: 1, Disp: prefetchDist + o})
			}
		}
	}
	for h := 0; h < na; h++ {
		q.block(r, wp, xp, woff, xoff, h*wb, h*34, q.kind == kRepack, func(i, j int) VecPhysical { return acc(i, j, h) })
	}
	ADDQ(U32(na*wb), woff)
	ADDQ(U32(na*34), xoff)
	DECQ(RCX)
	JNZ(LabelRef(loop))
	Label(done)

	tmp, z := xr[r.t.PhysicalIndex()], xr[r.d.PhysicalIndex()]
	if q.kind != kRepack {
		zero(z, q.evex)
		for i := 0; i < X; i++ {
			for j := 0; j < W; j++ {
				a := acc(i, j, 0)
				if q.kind == kQ80 && !q.dp() {
					VPERMQ(U8(0xd8), a, a)
				}
				if q.kind == kMXFP4 {
					VADDPS(acc(i, j, 1), a, a)
				}
				// cpugen's orders end with 0 + sum; ggml's mxfp4 kernel does not
				hsum8(a, tmp, z, q.evex, q.kind != kMXFP4)
			}
		}
	}
	if q.kind == kMXFP4 {
		// an odd last block: its whole sum, one scalar FMA (ggml's scalar tail,
		// sumf += d*sumi contracted)
		Load(Param("nb"), RCX)
		TESTQ(U32(1), RCX)
		JZ(LabelRef(name + "_even"))
		q.block(r, wp, xp, woff, xoff, 0, 0, true, func(i, j int) VecPhysical { return acc(i, j, 0) })
		Label(name + "_even")
	}
	if r.vrep {
		// row i's W results are lanes 0..W-1 of X(i)
		Load(Param("out"), RAX)
		Load(Param("ostride"), RBX)
		SHLQ(U8(2), RBX)
		for i := 0; i < X; i++ {
			if W == 4 {
				VMOVUPS(xr[i], Mem{Base: RAX})
			} else {
				VMOVQ(xr[i], Mem{Base: RAX})
			}
			ADDQ(RBX, RAX)
		}
	} else {
		storeOut(W, X, dot, func(i, j int) VecPhysical { return xr[acc(i, j, 0).PhysicalIndex()] })
	}
	VZEROUPPER()
	RET()
}

// q80WideTile writes the AVX-512 VNNI Q8_0 tile of 4 weight rows × 4
// activation rows with two outputs a zmm: lanes 0-7 are output (i, 2p)'s
// eight-lane accumulator and lanes 8-15 output (i, 2p+1)'s, the two weight
// rows' quants (and scales) side by side and the activation block in both
// halves. The dot product, the conversion, the scale product and the FMA
// of a block are then one instruction for two outputs, each lane's
// arithmetic that of the one-output tile in the same order (the same
// bits), and a block costs ~80 instructions instead of ~120.
func q80WideTile(name string) {
	const W, X, wb = 4, 4, 34
	TEXT(name, NOSPLIT, tileSig)
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is %d weight rows × %d Q8_0 rows of nb blocks (Q8_0 weights, DotQ8_0AVX2 order, AVX-512 VNNI), two outputs a zmm.", name, W, X))
	wp, xp, woff, xoff := tileStart(W, X, false)
	acc := func(i, p int) VecPhysical { return zr[2*i+p] } // outputs (i, 2p) and (i, 2p+1)
	for i := 0; i < X; i++ {
		for p := 0; p < 2; p++ {
			VPXORD(acc(i, p), acc(i, p), acc(i, p))
		}
	}
	bcast32(0x80808080, Z29, X29)
	loop, done := name+"_loop", name+"_done"
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	Label(loop)
	q80WideBlock(wp, xp, woff, xoff, acc)
	ADDQ(U32(wb), woff)
	ADDQ(U32(wb), xoff)
	DECQ(RCX)
	JNZ(LabelRef(loop))
	Label(done)
	// the odd outputs' accumulators (high halves) to Y8-Y15, then every
	// output's hsum_float_8 into its register's low lane
	for k := 0; k < 8; k++ {
		VEXTRACTF64X4(U8(1), zr[k], yr[8+k])
	}
	zero(X28, true)
	for k := 0; k < 16; k++ {
		hsum8(yr[k], X27, X28, true, true)
	}
	storeOut(W, X, false, func(i, j int) VecPhysical { return xr[2*i+j/2+8*(j%2)] })
	VZEROUPPER()
	RET()
}

// q80WideBlock emits one block of a wide Q8_0 tile of len(wp) weight rows
// (4 or 8) × len(xp) activation rows at the offsets woff, xoff: each pair
// of weight rows' f16 scales (8 copies each, widened to 16 lanes) and
// quants (+128 as unsigned bytes) side by side in Z20.. and Z16.., then
// each activation row's scale, quants in both halves and bias correction
// against every pair, into acc(i, p). The bias constant is in Z29.
func q80WideBlock(wp, xp []GPPhysical, woff, xoff GPPhysical, acc func(i, p int) VecPhysical) {
	ya, corr, dx, t, d, c1 := Z24, Z25, Z26, Z27, Z28, Z29
	P := len(wp) / 2
	wq, dw := zr[16:16+P], zr[20:20+P]
	for p := 0; p < P; p++ {
		lo, hi := wp[2*p], wp[2*p+1]
		VPBROADCASTW(m(lo, woff, 0), xr[dw[p].PhysicalIndex()])
		VPBROADCASTW(m(hi, woff, 0), X30)
		VINSERTI32X4(U8(1), X30, yr[dw[p].PhysicalIndex()], yr[dw[p].PhysicalIndex()])
		VCVTPH2PS(yr[dw[p].PhysicalIndex()], dw[p])
		VMOVDQU32(m(lo, woff, 2), yr[wq[p].PhysicalIndex()])
		VINSERTI64X4(U8(1), m(hi, woff, 2), wq[p], wq[p])
		VPXORD(c1, wq[p], wq[p])
	}
	for i := range xp {
		VPBROADCASTW(m(xp[i], xoff, 0), yr[dx.PhysicalIndex()])
		VCVTPH2PS(yr[dx.PhysicalIndex()], dx)
		VBROADCASTI64X4(m(xp[i], xoff, 2), ya)
		// corr = -(128·Σ4 y)
		VPXORD(corr, corr, corr)
		VPDPBUSD(ya, c1, corr)
		VPXORD(t, t, t)
		VPSUBD(corr, t, corr)
		for p := 0; p < P; p++ {
			VMOVDQA64(corr, t)
			VPDPBUSD(ya, wq[p], t)
			VCVTDQ2PS(t, t)
			VMULPS(dx, dw[p], d)
			VFMADD231PS(t, d, acc(i, p))
		}
	}
}

// q80WideTile8x4 is q80WideTile over 8 weight rows: each activation row's
// preparation (its scale, its quants in both halves, the bias correction:
// seven instructions) serves eight outputs instead of four, so a block
// costs ~130 instructions for 32 outputs where two 4×4 calls take ~160.
// Every output's lanes see the arithmetic of q80WideTile (the same bits).
// Twelve row pointers and one block offset (the weight and activation
// blocks are both 34 bytes) leave no register for the block count: it
// counts down in the frame.
func q80WideTile8x4(name string) {
	const W, X, wb = 8, 4, 34
	TEXT(name, NOSPLIT, tileSig)
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is %d weight rows × %d Q8_0 rows of nb blocks (Q8_0 weights, DotQ8_0AVX2 order, AVX-512 VNNI), two outputs a zmm.", name, W, X))
	wp := []GPPhysical{RSI, R8, R9, R10, R11, R12, R13, R14}
	xp := []GPPhysical{RDI, RAX, RBX, RDX}
	off := RCX
	left := AllocLocal(8)
	bcast32(0x80808080, Z29, X29) // through EAX: before the row pointers
	Load(Param("nb"), off)
	MOVQ(off, left)
	rowPointers("w", "wstride", wp, off)
	rowPointers("x", "xstride", xp, off)
	XORQ(off, off)
	acc := func(i, p int) VecPhysical { return zr[W/2*i+p] } // outputs (i, 2p) and (i, 2p+1)
	for i := 0; i < X; i++ {
		for p := 0; p < W/2; p++ {
			VPXORD(acc(i, p), acc(i, p), acc(i, p))
		}
	}
	loop, done := name+"_loop", name+"_done"
	CMPQ(left, U8(0))
	JE(LabelRef(done))
	Label(loop)
	q80WideBlock(wp, xp, off, off, acc)
	ADDQ(U32(wb), off)
	DECQ(left)
	JNZ(LabelRef(loop))
	Label(done)
	// per activation row: the odd outputs' accumulators (high halves) to
	// Y16-Y19, every output's hsum_float_8 into its register's low lane,
	// stored in order
	Load(Param("out"), RAX)
	Load(Param("ostride"), RBX)
	SHLQ(U8(2), RBX)
	zero(X28, true)
	for i := 0; i < X; i++ {
		for p := 0; p < W/2; p++ {
			VEXTRACTF64X4(U8(1), acc(i, p), yr[16+p])
		}
		for p := 0; p < W/2; p++ {
			hsum8(yr[acc(i, p).PhysicalIndex()], X27, X28, true, true)
			hsum8(yr[16+p], X27, X28, true, true)
		}
		for p := 0; p < W/2; p++ {
			VMOVSS(xr[acc(i, p).PhysicalIndex()], Mem{Base: RAX, Disp: 4 * 2 * p})
			VMOVSS(xr[16+p], Mem{Base: RAX, Disp: 4 * (2*p + 1)})
		}
		if i+1 < X {
			ADDQ(RBX, RAX)
		}
	}
	VZEROUPPER()
	RET()
}

// block emits one block of every pair of the tile at the row offsets plus
// (wd, xd): lanes into accOf's vectors, or (scalar) the block's whole sum
// into their lane 0 with one FMA.
//
// With one activation row and several weight rows (a decode tile) the
// weight rows stream through two register slots, each used as soon as it
// is decoded; otherwise every weight row keeps its own registers for all
// the activation rows.
func (q qkern) block(r qregs, wp, xp []GPPhysical, woff, xoff GPPhysical, wd, xd int, scalar bool, accOf func(i, j int) VecPhysical) {
	// scale: broadcast the f16 and widen it
	scale := func(mem Mem, v VecPhysical) {
		xv := xr[v.PhysicalIndex()]
		VPBROADCASTW(mem, xv)
		VCVTPH2PS(xv, v)
	}
	prepW := func(j, slot int) {
		switch {
		case r.vrep:
			MOVWLZX(m(wp[j], woff, wd), EAX)
			VPINSRW(U8(j), EAX, xr[r.dwv.PhysicalIndex()], xr[r.dwv.PhysicalIndex()])
		case q.kind == kMXFP4:
			MOVBLZX(m(wp[j], woff, wd), EAX)
			VBROADCASTSS(Mem{Base: R13, Index: RAX, Scale: 4}, r.dw[slot])
		default:
			scale(m(wp[j], woff, wd), r.dw[slot])
		}
		qs := m(wp[j], woff, wd+2)
		if q.kind == kMXFP4 {
			qs = m(wp[j], woff, wd+1)
		}
		switch {
		case q.kind == kQ80 && q.evex:
			// w+128 as unsigned bytes
			VPXORD(qs, r.c1, r.wq[slot])
		case q.kind == kQ80 && q.vex:
			VPXOR(qs, r.c1, r.wq[slot])
		case q.kind == kQ80:
			VPMOVSXBW(qs, r.wq[slot])
			VPMOVSXBW(m(wp[j], woff, wd+18), r.wq2[slot])
		case q.evex:
			// nibbles: qs[0:16]&15 then qs[0:16]>>4, as unsigned bytes
			VBROADCASTI32X4(qs, r.wq[slot])
			VPSRLVQ(shr4hi, r.wq[slot], r.wq[slot])
			VPANDD(r.c2, r.wq[slot], r.wq[slot])
		default:
			VBROADCASTI128(qs, r.wq[slot])
			VPSRLVQ(shr4hi, r.wq[slot], r.wq[slot])
			if q.vex {
				VPAND(r.c2, r.wq[slot], r.wq[slot])
			} else if q.kind == kMXFP4 {
				VPAND(nib0f, r.wq[slot], r.wq[slot])
			} else {
				VPAND(r.table, r.wq[slot], r.wq[slot])
			}
		}
		if q.kind == kMXFP4 {
			// E2M1 values (doubled) + 12, as unsigned bytes
			VPSHUFB(r.wq[slot], r.table, r.wq[slot])
		}
	}
	prepX := func(i int) {
		scale(m(xp[i], xoff, xd), r.dx)
		ys := m(xp[i], xoff, xd+2)
		switch {
		case q.evex:
			VMOVDQU32(ys, r.ya)
			// corr = -(c·Σ4 y): c = 128 (biased Q8_0), 8 (Q4_0), 12 (biased MXFP4)
			VPXORD(r.corr, r.corr, r.corr)
			VPDPBUSD(r.ya, r.c1, r.corr)
			VPXORD(r.t, r.t, r.t)
			VPSUBD(r.corr, r.t, r.corr)
		case q.vex:
			VMOVDQU(ys, r.ya)
			VPXOR(r.corr, r.corr, r.corr)
			q.dpbusd(r.ya, r.c1, r.corr)
			VPXOR(r.t, r.t, r.t)
			VPSUBD(r.corr, r.t, r.corr)
		case q.kind == kQ80:
			VPMOVSXBW(ys, r.ya)
			VPMOVSXBW(m(xp[i], xoff, xd+18), r.ya2)
		default:
			VMOVDQU(ys, r.ya)
			VPMADDUBSW(r.ya, r.c2, r.corr) // c·(y[2k] + y[2k+1])
		}
	}
	pair := func(i, j, slot int) {
		// t = the exact int32 lane sums Σ_{k<4} w[4l+k]·y[4l+k]
		t, d := r.t, r.d
		if r.vrep {
			t = r.vt[j]
		}
		switch {
		case q.evex:
			VMOVDQA64(r.corr, t)
			VPDPBUSD(r.ya, r.wq[slot], t)
		case q.vex:
			VMOVDQA(r.corr, t)
			q.dpbusd(r.ya, r.wq[slot], t)
		case q.kind == kQ80:
			VPMADDWD(r.ya, r.wq[slot], t)
			VPMADDWD(r.ya2, r.wq2[slot], d)
			// lanes come out as 0,1,4,5,2,3,6,7: fixed once at the end
			VPHADDD(d, t, t)
		default:
			VPMADDUBSW(r.ya, r.wq[slot], t)
			VPSUBW(r.corr, t, t)
			VPMADDWD(r.c1, t, t)
		}
		if r.vrep {
			return
		}
		a := accOf(i, j)
		if scalar {
			tx, dxx := xr[t.PhysicalIndex()], xr[d.PhysicalIndex()]
			if q.evex {
				VEXTRACTI32X4(U8(1), t, dxx)
			} else {
				VEXTRACTI128(U8(1), t, dxx)
			}
			VPADDD(dxx, tx, tx)
			VPSHUFD(U8(0x4e), tx, dxx)
			VPADDD(dxx, tx, tx)
			VPSHUFD(U8(0xb1), tx, dxx)
			VPADDD(dxx, tx, tx)
			VCVTDQ2PS(tx, tx)
			VMULSS(xr[r.dx.PhysicalIndex()], xr[r.dw[slot].PhysicalIndex()], dxx)
			VFMADD231SS(tx, dxx, xr[a.PhysicalIndex()])
			return
		}
		VCVTDQ2PS(t, t)
		VMULPS(r.dx, r.dw[slot], d)
		VFMADD231PS(t, d, a)
	}
	// combine sums each pair's lanes (VPHADDD tree, then the two halves)
	// into lane j, and does the W scalar FMAs of the order as one vector FMA
	combine := func(i int) {
		if !r.vrep {
			return
		}
		t := r.vt
		VPHADDD(t[1], t[0], t[0])
		if len(wp) == 4 {
			VPHADDD(t[3], t[2], t[2])
			VPHADDD(t[2], t[0], t[0])
		} else {
			VPHADDD(t[0], t[0], t[0])
		}
		t0, ext := xr[t[0].PhysicalIndex()], xr[r.ext.PhysicalIndex()]
		VEXTRACTI128(U8(1), t[0], ext)
		VPADDD(ext, t0, t0)
		VCVTDQ2PS(t0, t0)
		d := xr[r.d.PhysicalIndex()]
		VMULPS(xr[r.dx.PhysicalIndex()], xr[r.dwv.PhysicalIndex()], d)
		VFMADD231PS(t0, d, xr[accOf(i, 0).PhysicalIndex()])
	}
	widen := func() {
		if r.vrep {
			VCVTPH2PS(xr[r.dwv.PhysicalIndex()], xr[r.dwv.PhysicalIndex()])
		}
	}
	if len(xp) == 1 && len(wp) > 1 {
		prepX(0)
		for j := range wp {
			prepW(j, j%2)
			pair(0, j, j%2)
		}
		widen()
		combine(0)
		return
	}
	for j := range wp {
		prepW(j, j)
	}
	widen()
	for i := range xp {
		prepX(i)
		for j := range wp {
			pair(i, j, j)
		}
		combine(i)
	}
}

func (q qkern) describe() string {
	isa := "AVX2"
	switch {
	case q.evex:
		isa = "AVX-512 VNNI"
	case q.vex:
		isa = "AVX-VNNI"
	}
	switch q.kind {
	case kQ80:
		return "Q8_0 weights, DotQ8_0AVX2 order, " + isa
	case kQ40:
		return "Q4_0 weights, DotQ4_0AVX2 order, " + isa
	case kMXFP4:
		return "MXFP4 weights, DotMXFP4AVX2 order, " + isa
	}
	return "Q4_0 weights, DotQ4_0Repack8x8 order, " + isa
}

// hsum8 leaves hsum_float_8(a) (plus 0 first when zeroPlus) in a's lane 0:
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
func hsum8(a, tmp, z VecPhysical, evex, zeroPlus bool) {
	ax := xr[a.PhysicalIndex()]
	if evex {
		VEXTRACTF32X4(U8(1), a, tmp)
	} else {
		VEXTRACTF128(U8(1), a, tmp)
	}
	VADDPS(tmp, ax, ax)
	VMOVHLPS(ax, ax, tmp)
	VADDPS(tmp, ax, ax)
	VMOVSHDUP(ax, tmp)
	VADDSS(tmp, ax, ax)
	if zeroPlus {
		VADDSS(ax, z, ax)
	}
}

type fkern struct {
	name   string
	f16    bool
	groups int  // 16-lane accumulators per pair: 4 (ggml_vec_dot) or 1 (tinyBLAS)
	avx2   bool // each 16-lane accumulator as two ymm (the same lanes, for CPUs without AVX-512)
}

// gen writes one float tile kernel: nb is the element count n. Operands
// live in Z0-7 (Y0-3 for AVX2), accumulators from Z8 (Y8).
func (f fkern) gen(name string, W, X int, dot bool) {
	if dot {
		TEXT(name, NOSPLIT, dotSig)
	} else {
		TEXT(name, NOSPLIT, tileSig)
	}
	Pragma("noescape")
	order := map[bool]map[int]string{false: {4: "DotF32AVX512", 1: "DotF32TinyBLAS"}, true: {4: "DotF16AVX512", 1: "DotF16TinyBLAS"}}[f.f16][f.groups]
	isa := "AVX-512"
	halves, regs := 1, zr
	if f.avx2 {
		isa, halves, regs = "AVX2, two ymm per 16 lanes", 2, yr
	}
	Doc(fmt.Sprintf("%s is %d weight rows × %d activation rows of nb values in the %s order (%s).", name, W, X, order, isa))
	size, shift := 4, uint64(2)
	if f.f16 {
		size, shift = 2, 1
	}
	wp, xp := wpr[:W], xpr[:X]
	if dot {
		Load(Param("w"), wp[0])
		Load(Param("x"), xp[0])
	} else {
		rowPointers("w", "wstride", wp, RAX)
		rowPointers("x", "xstride", xp, RAX)
	}
	off, end := RBX, RDX
	Load(Param("nb"), RCX)
	MOVQ(RCX, end)
	SHLQ(U8(shift), end) // end = n*size
	chunk := 16 * f.groups
	SHRQ(U8(map[int]uint64{64: 6, 16: 4}[chunk]), RCX)
	XORQ(off, off)

	// accumulator (i, j, k), half h (lanes 8h..8h+7 when avx2)
	acch := func(i, j, k, h int) VecPhysical { return regs[8+((i*W+j)*f.groups+k)*halves+h] }
	acc := func(i, j, k int) VecPhysical { return acch(i, j, k, 0) }
	for i := 0; i < X; i++ {
		for j := 0; j < W; j++ {
			for k := 0; k < f.groups; k++ {
				for h := 0; h < halves; h++ {
					zero(acch(i, j, k, h), !f.avx2)
				}
			}
		}
	}
	loop, done := name+"_loop", name+"_done"
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	Label(loop)
	for k := 0; k < f.groups; k++ {
		for h := 0; h < halves; h++ {
			load := func(p GPPhysical, v VecPhysical) {
				mm := m(p, off, size*(16*k+8*h))
				if f.f16 {
					VCVTPH2PS(mm, v)
				} else {
					VMOVUPS(mm, v)
				}
			}
			for j := 0; j < W; j++ {
				load(wp[j], regs[j])
			}
			for i := 0; i < X; i++ {
				load(xp[i], regs[W+i])
			}
			for i := 0; i < X; i++ {
				for j := 0; j < W; j++ {
					VFMADD231PS(regs[W+i], regs[j], acch(i, j, k, h))
				}
			}
		}
	}
	ADDQ(U32(chunk*size), off)
	DECQ(RCX)
	JNZ(LabelRef(loop))
	Label(done)

	// off is now where the tail starts
	for i := 0; i < X; i++ {
		for j := 0; j < W; j++ {
			// the halving tree over the 16·groups lanes into X0
			switch {
			case f.avx2 && f.groups == 4:
				for h, t := range []VecPhysical{Y0, Y2} { // lanes 0-7, 8-15
					VADDPS(acch(i, j, 2, h), acch(i, j, 0, h), t)
					VADDPS(acch(i, j, 3, h), acch(i, j, 1, h), Y1)
					VADDPS(Y1, t, t)
				}
				VADDPS(Y2, Y0, Y0)
			case f.avx2:
				VADDPS(acch(i, j, 0, 1), acch(i, j, 0, 0), Y0)
			default:
				src := acc(i, j, 0)
				if f.groups == 4 {
					VADDPS(acc(i, j, 2), acc(i, j, 0), Z0)
					VADDPS(acc(i, j, 3), acc(i, j, 1), Z1)
					VADDPS(Z1, Z0, Z0)
					src = Z0
				}
				VEXTRACTF64X4(U8(1), src, Y1)
				VADDPS(Y1, yr[src.PhysicalIndex()], Y0)
			}
			VEXTRACTF128(U8(1), Y0, X1)
			VADDPS(X1, X0, X0)
			VMOVHLPS(X0, X0, X1)
			VADDPS(X1, X0, X0)
			VMOVSHDUP(X0, X1)
			VADDSS(X1, X0, X0)
			VXORPS(X2, X2, X2)
			tl, td := fmt.Sprintf("%s_tail%d_%d", name, i, j), fmt.Sprintf("%s_tdone%d_%d", name, i, j)
			if f.f16 {
				// sum = 0 + (double)r, then each product (exact in f32) added in double
				VCVTSS2SD(X0, X0, X0)
				VADDSD(X0, X2, X0)
			} else {
				VADDSS(X0, X2, X0)
			}
			MOVQ(off, RAX)
			Label(tl)
			CMPQ(RAX, end)
			JAE(LabelRef(td))
			if f.f16 {
				MOVWLZX(m(wp[j], RAX, 0), ECX)
				VMOVD(ECX, X1)
				VCVTPH2PS(X1, X1)
				MOVWLZX(m(xp[i], RAX, 0), ECX)
				VMOVD(ECX, X3)
				VCVTPH2PS(X3, X3)
				VMULSS(X3, X1, X1)
				VCVTSS2SD(X1, X1, X1)
				VADDSD(X1, X0, X0)
			} else {
				VMOVSS(m(wp[j], RAX, 0), X1)
				VFMADD231SS(m(xp[i], RAX, 0), X1, X0)
			}
			ADDQ(U32(size), RAX)
			JMP(LabelRef(tl))
			Label(td)
			if f.f16 {
				VCVTSD2SS(X0, X0, X0)
			}
			// park the result in the (now free) first accumulator's lane 0
			VMOVAPS(X0, xr[acc(i, j, 0).PhysicalIndex()])
		}
	}
	storeOut(W, X, dot, func(i, j int) VecPhysical { return xr[acc(i, j, 0).PhysicalIndex()] })
	VZEROUPPER()
	RET()
}

// quantQ80 writes the AVX2 Q8_0 activation quantizer: quant.QuantizeRowX86.
func quantQ80() {
	TEXT("quantQ80AVX2", NOSPLIT, "func(nb int, x *float32, dst *byte)")
	Pragma("noescape")
	Doc("quantQ80AVX2 quantizes nb blocks of 32 floats to Q8_0 as quant.QuantizeRowX86 (ggml's AVX2 quantize_row_q8_0).")
	Load(Param("nb"), RCX)
	Load(Param("x"), RSI)
	Load(Param("dst"), RDI)
	bcast32(0x7fffffff, Y8, X8)   // |·| mask
	bcast32(0x000000ff, Y9, X9)   // low byte of each dword
	bcast32(0x42fe0000, Y10, X10) // 127.0
	VMOVDQU(perm8, Y11)
	loop, done := "quantQ80AVX2_loop", "quantQ80AVX2_done"
	TESTQ(RCX, RCX)
	JZ(LabelRef(done))
	Label(loop)
	for k := 0; k < 4; k++ {
		VMOVUPS(Mem{Base: RSI, Disp: 32 * k}, yr[k])
	}
	// amax: a NaN |x| never wins (MAXPS returns the second source on NaN),
	// as in `if a > amax`
	VPXOR(Y4, Y4, Y4)
	for k := 0; k < 4; k++ {
		VANDPS(Y8, yr[k], Y5)
		VMAXPS(Y4, Y5, Y4)
	}
	VEXTRACTF128(U8(1), Y4, X5)
	VMAXPS(X4, X5, X4)
	VMOVHLPS(X4, X4, X5)
	VMAXPS(X4, X5, X4)
	VMOVSHDUP(X4, X5)
	VMAXSS(X4, X5, X4)
	// d = amax/127 to f16 (round to nearest even)
	VDIVSS(X10, X4, X5)
	VCVTPS2PH(U8(0), X5, X5)
	VPEXTRW(U8(0), X5, Mem{Base: RDI})
	// id = amax != 0 ? 127/amax : 0
	VDIVSS(X4, X10, X6)
	VXORPS(X7, X7, X7)
	VCMPSS(U8(4), X7, X4, X7) // amax != 0
	VANDPS(X7, X6, X6)
	VBROADCASTSS(X6, Y6)
	// q = low byte of the round-to-even int32 of x·id (what Go's int8(...)
	// of the value keeps; NaN gives 0x80000000, whose low byte is 0 as in Go)
	for k := 0; k < 4; k++ {
		VMULPS(Y6, yr[k], yr[k])
		VCVTPS2DQ(yr[k], yr[k])
		VPAND(Y9, yr[k], yr[k])
	}
	VPACKUSDW(Y1, Y0, Y0)
	VPACKUSDW(Y3, Y2, Y2)
	VPACKUSWB(Y2, Y0, Y0)
	VPERMD(Y0, Y11, Y0)
	VMOVDQU(Y0, Mem{Base: RDI, Disp: 2})
	ADDQ(U32(128), RSI)
	ADDQ(U32(34), RDI)
	DECQ(RCX)
	JNZ(LabelRef(loop))
	Label(done)
	VZEROUPPER()
	RET()
}

// rowsSig is a decode body's: tiles×4 weight rows wstride apart against one
// activation row, results to out[0 : 4·tiles]; pf is how far past a group's
// first row its prefetches go (a whole number of groups, 4·wstride each).
const rowsSig = "func(nb int, w *byte, wstride int, x *byte, out *float32, tiles int, pf int)"

// rowsBody writes q's one-row (decode) body over whole groups of four
// weight rows: Tile4x1's blocks (the same instructions per block, so the
// same bits) in one call for all the groups, the constant hoisted, and the
// prefetches aimed at the groups pf bytes ahead. A decode block's rows are
// contiguous, so Tile4x1's fixed distance past each row (2 KiB) lands in
// rows this group or the next is already reading, and from DRAM the tile
// ran at a third of the memory bandwidth; here each block prefetches the
// 136 bytes of the group ahead that match it (a group's 4 rows at 34 bytes
// a block), so the group ahead is in flight, line by line, as this one runs.
//
// (Measured slower here, on the 2-core EPYC, in cache and from DRAM: the
// scale products of 16 blocks at once, staged through the frame by integer
// stores or gathered with VPGATHERDD, and the four rows' scales packed into
// one quadword per block, each with the FMA's d by embedded broadcast; a
// prefetch distance of 4 KiB, and PREFETCHT1.)
func (q qkern) rowsBody(name string) {
	TEXT(name, NOSPLIT, rowsSig)
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is tiles×4 weight rows (wstride bytes apart) × 1 Q8_0 row of nb blocks (%s), one result per row in out, prefetching pf bytes ahead of each group.", name, q.describe()))
	wp, xp := wpr, xpr[:1] // SI, R8, R9, R10; DI
	off, nb, step, pf, tiles, out := RBX, RCX, R13, R14, R11, R12
	Load(Param("w"), wp[0])
	Load(Param("wstride"), RAX)
	for r := 1; r < 4; r++ {
		MOVQ(wp[r-1], wp[r])
		ADDQ(RAX, wp[r])
	}
	MOVQ(RAX, step)
	SHLQ(U8(2), step) // 4·wstride: the next group
	Load(Param("x"), xp[0])
	Load(Param("out"), out)
	Load(Param("tiles"), tiles)
	TESTQ(tiles, tiles)
	JZ(LabelRef(name + "_end"))
	r := q.regs()
	bcast32(0x80808080, r.c1, xr[r.c1.PhysicalIndex()])
	wb := q.wbytes()

	Label(name + "_tile")
	for j := 0; j < 4; j++ {
		zero(yr[j], false)
	}
	Load(Param("pf"), pf)
	ADDQ(wp[0], pf)
	XORQ(off, off)
	Load(Param("nb"), nb)
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_sum"))
	Label(name + "_blk")
	for o := 0; o < 4*wb; o += 64 {
		PREFETCHT0(Mem{Base: pf, Index: off, Scale: 4, Disp: o})
	}
	q.block(r, wp, xp, off, off, 0, 0, false, func(i, j int) VecPhysical { return yr[j] })
	ADDQ(U32(wb), off)
	DECQ(nb)
	JNZ(LabelRef(name + "_blk"))

	Label(name + "_sum")
	tmp, z := xr[r.t.PhysicalIndex()], xr[r.d.PhysicalIndex()]
	zero(z, true)
	for j := 0; j < 4; j++ {
		hsum8(yr[j], tmp, z, true, true)
		VMOVSS(xr[j], Mem{Base: out, Disp: 4 * j})
	}
	ADDQ(U8(16), out)
	for j := 0; j < 4; j++ {
		ADDQ(step, wp[j])
	}
	DECQ(tiles)
	JNZ(LabelRef(name + "_tile"))
	Label(name + "_end")
	VZEROUPPER()
	RET()
}
