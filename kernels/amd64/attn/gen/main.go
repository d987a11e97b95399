// Command gen writes the amd64 assembly of package attn with avo:
//
//	go run ./gen -out zz_attn_amd64.s -stubs zz_stubs_amd64.go -pkg attn
//
// Two loops of runtime/exec's f16 attention, each in an AVX-512 (zmm) and an
// AVX2 (ymm) build with the same arithmetic:
//
//   - dot: one query row (f16 values held as float32) against rows
//     consecutive key rows of f16, each in ggml_vec_dot_f16's AVX-512 order:
//     64 lanes, one FMA per lane and 64 values, then the lanes halved
//     pairwise (l[u] += l[u+w] for w = 32, 16, ..., 1).
//   - acc: the value accumulation over rows value rows: the accumulator,
//     held in f16, is rescaled (acc = f16(acc·ms)) where ms ≠ 1 and then
//     acc = f16(fma(v, vs, acc)), rounding with VCVTPS2PH mode 0 (nearest
//     even, quant.F32ToF16's).
//
// gen/q8.go adds the q8_0 cache's two loops (dotQ8, accQ8), in AVX-512
// VNNI and AVX2 builds.
//
// The FMAs round once, as quant.FMA32. The Go loops they replace use
// float32(math.FMA(float64...)), which rounds twice, but equals the once
// rounded result on these inputs: see the package doc.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

var (
	yr = [16]VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}
	zr = [32]VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
		Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
	xr = [32]VecPhysical{X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15}
)

// isa is one register width: lanes float32 per register.
type isa struct {
	name  string
	lanes int
	reg   func(i int) VecPhysical
	half  func(i int) VecPhysical // the register holding lanes f16 values
}

// hiY are Y24-Y31, the f16 halves of an eight-register block.
var hiY = [8]VecPhysical{Y24, Y25, Y26, Y27, Y28, Y29, Y30, Y31}

var (
	avx512 = isa{"AVX512", 16, func(i int) VecPhysical { return zr[i] }, func(i int) VecPhysical { return yr[i] }}
	avx2   = isa{"AVX2", 8, func(i int) VecPhysical { return yr[i] }, func(i int) VecPhysical { return xr[i] }}
)

var one Mem

func main() {
	ConstraintExpr("amd64")
	one = GLOBL("one", RODATA|NOPTR)
	DATA(0, F32(1))
	for _, s := range []isa{avx512, avx2} {
		genDot(s)
		genAcc(s)
	}
	q8Data()
	genDotQ8AVX512()
	genDotQ8AVX2()
	genAccQ8(avx512)
	genAccQ8(avx2)
	Generate()
}

// genDot: out[r] = the ordered dot of q (nc·64 values) and the f16 row at
// k + r·kstride values, for r < rows.
func genDot(s isa) {
	TEXT("dot"+s.name, NOSPLIT, "func(nc int, q *float32, k *uint16, kstride int, rows int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("dot%s: out[r] = ggml_vec_dot_f16's 64-lane AVX-512 sum of q (nc·64 values) and the f16 row k[r·kstride:], for r < rows (%s).", s.name, s.name))
	nc, q, k, ks, rows, out := Load(Param("nc"), GP64()), Load(Param("q"), GP64()), Load(Param("k"), GP64()), Load(Param("kstride"), GP64()), Load(Param("rows"), GP64()), Load(Param("out"), GP64())
	SHLQ(U8(1), ks) // values to bytes
	nreg := 64 / s.lanes
	acc := func(i int) VecPhysical { return s.reg(i) }
	kv := func(i int) VecPhysical { return s.reg(nreg + i) }
	qp, kp, c := GP64(), GP64(), GP64()
	TESTQ(rows, rows)
	JZ(LabelRef("dot" + s.name + "_done"))
	Label("dot" + s.name + "_row")
	for i := 0; i < nreg; i++ {
		if s.lanes == 16 {
			VPXORD(acc(i), acc(i), acc(i)) // VXORPS on zmm would need AVX512DQ
		} else {
			VXORPS(acc(i), acc(i), acc(i))
		}
	}
	MOVQ(q, qp)
	MOVQ(k, kp)
	MOVQ(nc, c)
	TESTQ(c, c)
	JZ(LabelRef("dot" + s.name + "_reduce"))
	Label("dot" + s.name + "_chunk")
	for i := 0; i < nreg; i++ {
		VCVTPH2PS(Mem{Base: kp, Disp: 2 * s.lanes * i}, kv(i))
	}
	for i := 0; i < nreg; i++ {
		VFMADD231PS(Mem{Base: qp, Disp: 4 * s.lanes * i}, kv(i), acc(i))
	}
	ADDQ(U32(256), qp)
	ADDQ(U32(128), kp)
	DECQ(c)
	JNZ(LabelRef("dot" + s.name + "_chunk"))
	Label("dot" + s.name + "_reduce")
	// lanes u and u+w are registers a and a+w/lanes while w spans registers
	for w := nreg / 2; w >= 1; w /= 2 {
		for i := 0; i < w; i++ {
			VADDPS(acc(i+w), acc(i), acc(i))
		}
	}
	if s.lanes == 16 {
		VEXTRACTF64X4(U8(1), Z0, Y1)
		VADDPS(Y1, Y0, Y0)
	}
	VEXTRACTF128(U8(1), Y0, X1)
	VADDPS(X1, X0, X0)
	VMOVHLPS(X0, X0, X1)
	VADDPS(X1, X0, X0)
	VMOVSHDUP(X0, X1)
	VADDSS(X1, X0, X0)
	VMOVSS(X0, Mem{Base: out})
	ADDQ(U8(4), out)
	ADDQ(ks, k)
	DECQ(rows)
	JNZ(LabelRef("dot" + s.name + "_row"))
	Label("dot" + s.name + "_done")
	VZEROUPPER()
	RET()
}

// genAcc: for r < rows, acc (nv·lanes values) = f16(acc·ms[r]) where
// ms[r] ≠ 1, then f16(fma(v row r, vs[r], acc)). The columns are
// independent, so it runs blocks of up to 8 (AVX-512; AVX2 4) registers
// down all the rows.
func genAcc(s isa) {
	name := "acc" + s.name
	TEXT(name, NOSPLIT, "func(nv int, acc *float32, v *uint16, vstride int, rows int, vs *float32, ms *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s: for r < rows, acc (nv·%d values) = f16(acc·ms[r]) where ms[r] ≠ 1, then acc = f16(fma(f16 row v[r·vstride:], vs[r], acc)) (%s).", name, s.lanes, s.name))
	nv, acc, v, vst, rows, vs, ms := Load(Param("nv"), GP64()), Load(Param("acc"), GP64()), Load(Param("v"), GP64()), Load(Param("vstride"), GP64()), Load(Param("rows"), GP64()), Load(Param("vs"), GP64()), Load(Param("ms"), GP64())
	SHLQ(U8(1), vst)
	TESTQ(rows, rows)
	JZ(LabelRef(name + "_done"))
	vp, r := GP64(), GP64()
	ones, mreg, sreg := s.reg(12), s.reg(13), s.reg(14)
	VBROADCASTSS(one, ones)
	block := func(nb int) {
		l := fmt.Sprintf("%s_b%d", name, nb)
		a := func(i int) VecPhysical { return s.reg(i) }
		t := func(i int) VecPhysical { return s.reg(4 + i) }
		h := func(i int) VecPhysical { return s.half(8 + i) }
		if nb > 4 { // AVX-512 only: temporaries and halves in Z16-Z31
			t = func(i int) VecPhysical { return zr[16+i] }
			h = func(i int) VecPhysical { return hiY[i] }
		}
		for i := 0; i < nb; i++ {
			VMOVUPS(Mem{Base: acc, Disp: 4 * s.lanes * i}, a(i))
		}
		MOVQ(v, vp)
		XORQ(r, r)
		Label(l + "_row")
		VBROADCASTSS(Mem{Base: ms, Index: r, Scale: 4}, mreg)
		VUCOMISS(one, mreg.(Vec).AsX())
		JNE(LabelRef(l + "_rescale"))
		JP(LabelRef(l + "_rescale"))
		Label(l + "_fma")
		VBROADCASTSS(Mem{Base: vs, Index: r, Scale: 4}, sreg)
		for i := 0; i < nb; i++ {
			VCVTPH2PS(Mem{Base: vp, Disp: 2 * s.lanes * i}, t(i))
		}
		for i := 0; i < nb; i++ {
			VFMADD231PS(sreg, t(i), a(i))
		}
		for i := 0; i < nb; i++ {
			VCVTPS2PH(U8(0), a(i), h(i))
		}
		for i := 0; i < nb; i++ {
			VCVTPH2PS(h(i), a(i))
		}
		ADDQ(vst, vp)
		INCQ(r)
		CMPQ(r, rows)
		JB(LabelRef(l + "_row"))
		for i := 0; i < nb; i++ {
			VMOVUPS(a(i), Mem{Base: acc, Disp: 4 * s.lanes * i})
		}
		JMP(LabelRef(l + "_next"))
		// out of line: the rescale is rare once the running max settles
		Label(l + "_rescale")
		for i := 0; i < nb; i++ {
			VMULPS(mreg, a(i), a(i))
		}
		for i := 0; i < nb; i++ {
			VCVTPS2PH(U8(0), a(i), h(i))
		}
		for i := 0; i < nb; i++ {
			VCVTPH2PS(h(i), a(i))
		}
		JMP(LabelRef(l + "_fma"))
		Label(l + "_next")
		ADDQ(U32(4*s.lanes*nb), acc)
		ADDQ(U32(2*s.lanes*nb), v)
		SUBQ(U8(nb), nv)
	}
	if s.lanes == 16 {
		// eight registers (a 128-value head in one pass): eight independent
		// FMA → f16 → f32 chains a row where four left each row waiting on
		// the round trip's latency
		Label(name + "_loop8")
		CMPQ(nv, U8(8))
		JB(LabelRef(name + "_loop4"))
		block(8)
		JMP(LabelRef(name + "_loop8"))
	}
	Label(name + "_loop4")
	CMPQ(nv, U8(4))
	JB(LabelRef(name + "_loop1"))
	block(4)
	JMP(LabelRef(name + "_loop4"))
	Label(name + "_loop1")
	TESTQ(nv, nv)
	JZ(LabelRef(name + "_done"))
	block(1)
	JMP(LabelRef(name + "_loop1"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
