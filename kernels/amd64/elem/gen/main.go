// Command gen writes the amd64 assembly of package elem with avo:
//
//	go run ./gen -out zz_elem_amd64.s -stubs zz_stubs_amd64.go -pkg elem
//
// siluAVX512 is ggml's AVX512 ggml_v_silu on nb blocks of 16 values,
// instruction for instruction as ggml_v_expf (vec.h) and ggml_v_silu write
// it: every FMA rounds once, the final scaling is VSCALEFPS, and lanes with
// |n| > 192 are replaced by 0 (n <= 0) or +Inf.
package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The constants of ggml_v_expf and ggml_v_silu, in the order of the data.
var consts = []uint32{
	math.Float32bits(0x1.8p23),       // r
	math.Float32bits(0x1.715476p+0),  // log2 e
	math.Float32bits(0x1.62e4p-1),    // ln 2, high part
	math.Float32bits(0x1.7f7d1cp-20), // ln 2, low part
	math.Float32bits(0x1.0e4020p-7),
	math.Float32bits(0x1.573e2ep-5),
	math.Float32bits(0x1.555e66p-3),
	math.Float32bits(0x1.fffdb6p-2),
	math.Float32bits(0x1.ffffecp-1),
	math.Float32bits(1),
	math.Float32bits(192),
	math.Float32bits(float32(math.Inf(1))),
	0x7fffffff, // |x| mask
}

const (
	cR = iota
	cLog2e
	cLn2hi
	cLn2lo
	cC5
	cC4
	cC3
	cC2
	cC1
	cOne
	c192
	cInf
	cAbs
)

func main() {
	ConstraintExpr("amd64")
	tab := GLOBL("siluconst", RODATA|NOPTR)
	for i, c := range consts {
		DATA(4*i, U32(c))
	}

	TEXT("siluAVX512", NOSPLIT, "func(nb int, x *float32, y *float32)")
	Pragma("noescape")
	Doc("siluAVX512: y[i] = x[i]/(1+ggml_v_expf(0-x[i])) for i < nb·16, ggml's AVX512 ggml_v_silu (AVX512F).")
	nb, x, y := Load(Param("nb"), GP64()), Load(Param("x"), GP64()), Load(Param("y"), GP64())
	zr := []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
		Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}
	c := func(i int) VecPhysical { return zr[16+i] }
	for i := range consts {
		VBROADCASTSS(tab.Offset(4*i), c(i))
	}
	zero := zr[31]
	VPXORD(zero, zero, zero) // VXORPS on zmm would need AVX512DQ

	TESTQ(nb, nb)
	JZ(LabelRef("silu_done"))
	Label("silu_loop")
	// Two independent blocks per iteration where there are two, for
	// latency; registers 0-7 for the first, 8-15 for the second.
	block := func(base, off int) {
		r := func(i int) VecPhysical { return zr[base+i] }
		xv, v, z, n, b, u, t, j := r(0), r(1), r(2), r(3), r(4), r(5), r(6), r(7)
		VMOVUPS(Mem{Base: x, Disp: off}, xv)
		VSUBPS(xv, zero, v) // v = 0 - x
		// z = fma(v, log2e, r); n = z - r
		VMOVAPS(c(cR), z)
		VFMADD231PS(c(cLog2e), v, z)
		VSUBPS(c(cR), z, n)
		// b = fnmadd(n, ln2lo, fnmadd(n, ln2hi, v))
		VMOVAPS(v, b)
		VFNMADD231PS(c(cLn2hi), n, b)
		VFNMADD231PS(c(cLn2lo), n, b)
		VMULPS(b, b, u)
		// t = fma(fma(c5, b, c4), u, fma(c3, b, c2))
		VMOVAPS(c(cC4), t)
		VFMADD231PS(b, c(cC5), t)
		VMOVAPS(c(cC2), z) // z is free again
		VFMADD231PS(b, c(cC3), z)
		VFMADD231PS(u, t, z)
		// j = fma(t, u, fma(c1, b, 1))
		VMOVAPS(c(cOne), j)
		VFMADD231PS(b, c(cC1), j)
		VFMADD231PS(u, z, j)
		// res = scalef(j, n)
		VSCALEFPS(n, j, t)
		// where |n| > 192: n <= 0 ? 0 : +Inf
		VPANDD(c(cAbs), n, b)
		VCMPPS(U8(0x1e), c(c192), b, K1) // |n| > 192, _CMP_GT_OQ
		VCMPPS(U8(0x12), zero, n, K2)    // n <= 0, _CMP_LE_OQ
		VMOVAPS(c(cInf), u)
		VMOVAPS(zero, K2, u)
		VMOVAPS(u, K1, t)
		// y = x / (1 + e)
		VADDPS(t, c(cOne), t)
		VDIVPS(t, xv, t)
		VMOVUPS(t, Mem{Base: y, Disp: off})
	}
	CMPQ(nb, U8(2))
	JB(LabelRef("silu_one"))
	block(0, 0)
	block(8, 64)
	ADDQ(U32(128), x)
	ADDQ(U32(128), y)
	SUBQ(U8(2), nb)
	JNZ(LabelRef("silu_loop"))
	JMP(LabelRef("silu_done"))
	Label("silu_one")
	block(0, 0)
	Label("silu_done")
	VZEROUPPER()
	RET()

	genExp()
	genBinary("addAVX512", "y[i] = a[i] + b[i]", VADDPS)
	genBinary("mulAVX512", "y[i] = a[i] · b[i]", VMULPS)
	genScale()
	genF16()
	Generate()
}

// genExp writes expAVX512, Go's math.Exp on amd64 (math/exp_amd64.s with
// useFMA, Shibata's method from SLEEF) on nb blocks of 8 float64 lanes:
// the same operations in the same order, the branches turned into masks.
func genExp() {
	tab := GLOBL("expconst", RODATA|NOPTR)
	ec := []uint64{
		math.Float64bits(1.4426950408889634073599246810018920),                  // LOG2E
		math.Float64bits(0.69314718055966295651160180568695068359375),           // LN2U
		math.Float64bits(0.28235290563031577122588448175013436025525412068e-12), // LN2L
		math.Float64bits(0.0625),
		math.Float64bits(2.4801587301587301587e-5),
		math.Float64bits(1.9841269841269841270e-4),
		math.Float64bits(1.3888888888888888889e-3),
		math.Float64bits(8.3333333333333333333e-3),
		math.Float64bits(4.1666666666666666667e-2),
		math.Float64bits(1.6666666666666666667e-1),
		math.Float64bits(0.5),
		math.Float64bits(1.0),
		math.Float64bits(2.0),
		math.Float64bits(7.09782712893384e+02), // Overflow
		0x7FF0000000000000,                     // +Inf
		0xFFF0000000000000,                     // -Inf
		0x7FFFFFFFFFFFFFFF,                     // |x| mask
		math.Float64bits(0x1p-1022),
		0x3FF,
		0x3FE,
		0x7FF,
		uint64(0xFFFFFFFFFFFFFFCC), // -52
		0,                          // zero
	}
	for i, c := range ec {
		DATA(8*i, U64(c))
	}
	const (
		kLog2e = iota
		kLn2u
		kLn2l
		kSixteenth
		kP64
		kP56
		kP48
		kP40
		kP32
		kP24
		kHalf
		kOne
		kTwo
		kOverflow
		kPosInf
		kNegInf
		kAbs
		kTiny
		kBias
		kBias1
		kMaxExp
		kMin52
		kZero
	)

	TEXT("expAVX512", NOSPLIT, "func(nb int, x *float64, y *float64)")
	Pragma("noescape")
	Doc("expAVX512: y[i] = math.Exp(x[i]) (its amd64 FMA assembly) for i < nb·8 (AVX512F).")
	nb, x, y := Load(Param("nb"), GP64()), Load(Param("x"), GP64()), Load(Param("y"), GP64())
	zr := []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9}
	c := func(i int) VecPhysical {
		return []VecPhysical{Z9, Z10, Z11, Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
	}
	for i := range ec {
		VBROADCASTSD(tab.Offset(8*i), c(i))
	}
	TESTQ(nb, nb)
	JZ(LabelRef("exp_done"))
	Label("exp_loop")
	xv, x0, x1, t, e, bx, sc := zr[0], zr[1], zr[2], zr[3], zr[4], zr[5], zr[6]
	ey := Y4
	VMOVUPD(Mem{Base: x}, xv)
	// e = int32(round(x·LOG2E)); x0 = x - e·LN2U - e·LN2L
	VMULPD(c(kLog2e), xv, t)
	VCVTPD2DQ(t, ey)
	VCVTDQ2PD(ey, t)
	VPMOVSXDQ(ey, e)
	VMOVAPD(xv, x0)
	VFNMADD231PD(c(kLn2u), t, x0)
	VFNMADD231PD(c(kLn2l), t, x0)
	VMULPD(c(kSixteenth), x0, x0)
	// Taylor series
	VMOVAPD(c(kP64), x1)
	for _, k := range []int{kP56, kP48, kP40, kP32, kP24, kHalf, kOne} {
		VFMADD213PD(c(k), x0, x1) // x1 = x1·x0 + k
	}
	VMULPD(x1, x0, x0)
	for i := 0; i < 3; i++ {
		VADDPD(c(kTwo), x0, x1)
		VMULPD(x1, x0, x0)
	}
	VADDPD(c(kTwo), x0, x1)
	VFMADD213PD(c(kOne), x1, x0) // x0 = x0·x1 + 1
	// ldexp: bx = e + 0x3FF; bx >= 1: x0·2^(bx-1023); -52 <= bx <= 0:
	// (x0·2^(bx-1))·2^-1022; bx < -52: 0; bx >= 0x7FF: +Inf
	VPADDQ(c(kBias), e, bx)
	VPCMPQ(U8(2), c(kZero), bx, K1) // bx <= 0 (denormal)
	VPSLLQ(U8(52), bx, sc)
	VPADDQ(c(kBias1), bx, t)
	VPSLLQ(U8(52), t, K1, sc)
	VMULPD(sc, x0, x0)
	VMULPD(c(kTiny), x0, K1, x0)
	VPCMPQ(U8(1), c(kMin52), bx, K2) // bx < -52
	VMOVAPD(c(kZero), K2, x0)
	VPCMPQ(U8(5), c(kMaxExp), bx, K3) // bx >= 0x7FF
	VMOVAPD(c(kPosInf), K3, x0)
	// x > Overflow (ordered): +Inf
	VCMPPD(U8(0x1e), c(kOverflow), xv, K4)
	VMOVAPD(c(kPosInf), K4, x0)
	// not finite: x itself, 0 for -Inf
	VPANDQ(c(kAbs), xv, t)
	VPCMPQ(U8(5), c(kPosInf), t, K5) // |x| bits >= +Inf bits
	VMOVAPD(xv, K5, x0)
	VPCMPEQQ(c(kNegInf), xv, K6)
	VMOVAPD(c(kZero), K6, x0)
	VMOVUPD(x0, Mem{Base: y})
	ADDQ(U8(64), x)
	ADDQ(U8(64), y)
	DECQ(nb)
	JNZ(LabelRef("exp_loop"))
	Label("exp_done")
	VZEROUPPER()
	RET()
}

// genBinary writes name(nb, a, b, y): y = op(a, b) on nb blocks of 16, the
// operands in the Go expression's order (a first: its NaN wins where both
// are NaN, as in the Go code's ADDSS/MULSS).
func genBinary(name, what string, op func(ops ...Op)) {
	TEXT(name, NOSPLIT, "func(nb int, a *float32, b *float32, y *float32)")
	Pragma("noescape")
	Doc(name + ": " + what + " for i < nb·16 (AVX512F).")
	nb, a, b, y := Load(Param("nb"), GP64()), Load(Param("a"), GP64()), Load(Param("b"), GP64()), Load(Param("y"), GP64())
	loop16(name, nb, []Register{a, b, y}, func(k int, off int) {
		z := []VecPhysical{Z0, Z1, Z2, Z3}[k]
		VMOVUPS(Mem{Base: a, Disp: off}, z)
		op(Mem{Base: b, Disp: off}, z, z) // z = z op b
		VMOVUPS(z, Mem{Base: y, Disp: off})
	})
}

// genScale writes scaleAVX512(nb, x, s, w, y): y = x·s, times w[i] where
// w is not nil, as float32((x·s)·w): the tail of cpugen.RMSNorm (and the
// Scale op without w).
func genScale() {
	TEXT("scaleAVX512", NOSPLIT, "func(nb int, x *float32, s float32, w *float32, y *float32)")
	Pragma("noescape")
	Doc("scaleAVX512: y[i] = x[i]·s, then ·w[i] where w is not nil, for i < nb·16 (AVX512F).")
	nb, x, w, y := Load(Param("nb"), GP64()), Load(Param("x"), GP64()), Load(Param("w"), GP64()), Load(Param("y"), GP64())
	sx := Load(Param("s"), XMM())
	VBROADCASTSS(sx, Z8)
	TESTQ(w, w)
	JZ(LabelRef("scale_now"))
	loop16("scalew", nb, []Register{x, w, y}, func(k int, off int) {
		z := []VecPhysical{Z0, Z1, Z2, Z3}[k]
		VMOVUPS(Mem{Base: x, Disp: off}, z)
		VMULPS(Z8, z, z) // x·s, x first as in Go
		VMULPS(Mem{Base: w, Disp: off}, z, z)
		VMOVUPS(z, Mem{Base: y, Disp: off})
	})
	Label("scale_now")
	loop16("scalen", nb, []Register{x, y}, func(k int, off int) {
		z := []VecPhysical{Z0, Z1, Z2, Z3}[k]
		VMOVUPS(Mem{Base: x, Disp: off}, z)
		VMULPS(Z8, z, z)
		VMOVUPS(z, Mem{Base: y, Disp: off})
	})
}

// genF16 writes f16AVX512(nb, x, y): y = f16(x) rounding to nearest even
// (VCVTPS2PH mode 0), which is quant.F32ToF16 bit for bit, NaNs included
// (both quiet them and keep the payload's top 9 bits).
func genF16() {
	TEXT("f16AVX512", NOSPLIT, "func(nb int, x *float32, y *uint16)")
	Pragma("noescape")
	Doc("f16AVX512: y[i] = quant.F32ToF16(x[i]) for i < nb·16 (AVX512F).")
	nb, x, y := Load(Param("nb"), GP64()), Load(Param("x"), GP64()), Load(Param("y"), GP64())
	TESTQ(nb, nb)
	JZ(LabelRef("f16_done"))
	Label("f16_loop")
	VMOVUPS(Mem{Base: x}, Z0)
	VCVTPS2PH(U8(0), Z0, Mem{Base: y})
	ADDQ(U8(64), x)
	ADDQ(U8(32), y)
	DECQ(nb)
	JNZ(LabelRef("f16_loop"))
	Label("f16_done")
	VZEROUPPER()
	RET()
}

// loop16 runs body over nb blocks of 16 float32, four blocks an iteration
// while there are four, then one at a time; ptrs advance 64 bytes a block.
// It ends with VZEROUPPER and RET.
func loop16(name string, nb Register, ptrs []Register, body func(k, off int)) {
	CMPQ(nb, U8(4))
	JB(LabelRef(name + "_one"))
	Label(name + "_four")
	for k := 0; k < 4; k++ {
		body(k, 64*k)
	}
	for _, p := range ptrs {
		ADDQ(U32(256), p)
	}
	SUBQ(U8(4), nb)
	CMPQ(nb, U8(4))
	JAE(LabelRef(name + "_four"))
	Label(name + "_one")
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	body(0, 0)
	for _, p := range ptrs {
		ADDQ(U8(64), p)
	}
	DECQ(nb)
	JMP(LabelRef(name + "_one"))
	Label(name + "_done")
	VZEROUPPER()
	RET()
}
