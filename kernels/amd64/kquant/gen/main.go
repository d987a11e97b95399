// Command gen writes kernels/amd64/kquant's assembly with avo: the k-quant
// row dots in ggml's AVX2 order (kernels/cpugen DotQ4_KAVX2, DotQ6_KAVX2)
// and the Q8_K activation quantizer (quant.QuantizeRowX86). Each dot is
// emitted for X activation rows at once: every weight super-block is decoded
// once into registers and multiplied with the X rows' blocks, whose integer
// lanes stay in registers; the per-row f32 accumulators live in the frame.
// The one-row body also comes as a Rows kernel (cpukern.Rows: the body
// looped over weight rows wstride apart, for decode), and prefetches the
// weights prefetchDist ahead.
//
//	go run ./gen -out zz_kquant_amd64.s -stubs zz_stubs_amd64.go
package main

import (
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"

	"github.com/jitllm/jitllm/kernels/amd64/internal/vexvnni"
)

const (
	q4kBytes = 144
	q5kBytes = 176
	q6kBytes = 210
	q8kBytes = 292
)

// consts holds the constant vectors, 32 bytes each.
var consts Mem

var constOff = map[string]int{}

func constants() {
	consts = GLOBL("kqconst", RODATA|NOPTR)
	off := 0
	vec := func(name string, b [32]byte) {
		constOff[name] = off
		for i, v := range b {
			DATA(off+i, U8(v))
		}
		off += 32
	}
	fill := func(v byte) (b [32]byte) {
		for i := range b {
			b[i] = v
		}
		return
	}
	dw := func(v uint32) (b [32]byte) {
		for i := 0; i < 8; i++ {
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
		return
	}
	vec("m4", fill(0xf))
	vec("m2", fill(3))
	vec("m32", fill(32))
	vec("one8", fill(1))
	vec("one16", dw(0x00010001))
	vec("sign", dw(0x80000000))
	vec("abs", dw(0x7fffffff))
	vec("magic", dw(0x4b400000)) // 12582912.f
	vec("mant", dw(0x007fffff))
	vec("half22", dw(0x00400000))
	vec("i127", dw(127))
	vec("ff", dw(0xff))
	var perm [32]byte // dword order 0,4,1,5,2,6,3,7
	for i, v := range []byte{0, 4, 1, 5, 2, 6, 3, 7} {
		perm[4*i] = v
	}
	vec("perm", perm)
	// get_scale_shuffle_k4(i): int16 scale i of 16 into every word
	for i := 0; i < 8; i++ {
		var b [32]byte
		for w := 0; w < 16; w++ {
			b[2*w], b[2*w+1] = byte(2*i), byte(2*i+1)
		}
		vec(fmt.Sprintf("k4s%d", i), b)
	}
	// get_scale_shuffle(i): bytes 2i (×8) then 2i+1 (×8), in 16 bytes
	for i := 0; i < 8; i += 2 {
		var b [32]byte
		for h := 0; h < 2; h++ {
			for j := 0; j < 16; j++ {
				b[16*h+j] = byte(2*(i+h) + j/8)
			}
		}
		constOff[fmt.Sprintf("s6s%d", i)] = off
		constOff[fmt.Sprintf("s6s%d", i+1)] = off + 16
		vec(fmt.Sprintf("s6pair%d", i), b)
	}
	// 64-byte vectors of the AVX-512 kernels
	vec64 := func(name string, b [64]byte) {
		constOff[name] = off
		for i, v := range b {
			DATA(off+i, U8(v))
		}
		off += 64
	}
	words := func(f func(w int) int) (b [64]byte) {
		for w := 0; w < 32; w++ {
			b[2*w], b[2*w+1] = byte(f(w)), byte(f(w)>>8)
		}
		return
	}
	var m4z, m2z, m32z, one8z [64]byte
	for i := range m4z {
		m4z[i], m2z[i], m32z[i], one8z[i] = 0xf, 3, 32, 1
	}
	vec64("one8z", one8z)
	for j := 0; j < 4; j++ {
		vec64(fmt.Sprintf("srl5_%d", j), words(func(w int) int { return 2*j + w/16 }))
	}
	vec64("m4z", m4z)
	vec64("m2z", m2z)
	vec64("m32z", m32z)
	// VPSRLVW counts: the low 32 bytes shift by a, the high by b
	for _, sh := range [][2]int{{0, 4}, {0, 2}, {4, 6}} {
		vec64(fmt.Sprintf("srl%d%d", sh[0], sh[1]), words(func(w int) int { return sh[w/16] }))
	}
	// VPERMW indexes: Q4_K's scale words 2j (low 32 bytes) and 2j+1 (high)
	for j := 0; j < 4; j++ {
		vec64(fmt.Sprintf("k4p%d", j), words(func(w int) int { return 2*j + w/16 }))
	}
	// the 2×8's epilogue: both weight rows' mins words mn[w/2] (the second
	// row's scales at words 16..31), and the rows' y.d offsets r%8 (times xstride)
	vec64("k4mn2", words(func(w int) int { return 16*(w/16) + 8 + (w%16)/2 }))
	var iota8x2 [64]byte
	for i := 0; i < 16; i++ {
		iota8x2[4*i] = byte(i % 8)
	}
	vec64("iota8x2", iota8x2)
	// Q6_K's scales of values 64i..64i+63 of the block: one per 16 values
	for i := 0; i < 4; i++ {
		vec64(fmt.Sprintf("s6p%d", i), words(func(w int) int { return 4*i + w/8 }))
	}
	// Q6_K's qh bits of each half (half 0: bits 0-1 | 2-3, half 1: 4-5 |
	// 6-7 of the low | high 32 bytes), masked in place so the word shifts
	// (sll42, srl02) move them to bits 4-5 without crossing bytes
	bytes2 := func(a, b byte) (v [64]byte) {
		for i := range v {
			v[i] = a
			if i >= 32 {
				v[i] = b
			}
		}
		return
	}
	vec64("q6hm0", bytes2(0x03, 0x0c))
	vec64("q6hm1", bytes2(0x30, 0xc0))
	vec64("sll42", words(func(w int) int { return 4 - 2*(w/16) }))
	// Q4_K's scale bytes unpacked in vector registers (q4kScales512): the
	// words of bytes 0..15 of the block (s[k] = word 4+k) permuted so that
	// words 0..15 hold sc0..7, mn0..7 before their high bits and words
	// 16..31 those high bits (word 16 is zero), then shifted and masked.
	k4u := [32]int{4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15,
		16, 16, 16, 16, 4, 5, 6, 7, 16, 16, 16, 16, 8, 9, 10, 11}
	vec64("k4u", words(func(w int) int { return k4u[w] }))
	vec64("k4ucnt", words(func(w int) int {
		switch {
		case w >= 16:
			return 2 // (s>>6)<<4 = (s>>2)&0x30
		case w >= 12:
			return 4
		}
		return 0
	}))
	vec64("k4umask", words(func(w int) int {
		switch {
		case w >= 16:
			return 0x30
		case w >= 4 && w < 8, w >= 12:
			return 15
		}
		return 63
	}))
	for _, f := range []struct {
		name string
		v    uint32
	}{{"f0", 0}, {"fm127", 0xc2fe0000}, {"f1", 0x3f800000}} {
		constOff[f.name] = off
		DATA(off, U32(f.v))
		off += 4
	}
}

func c(name string) Mem {
	o, ok := constOff[name]
	if !ok {
		panic("no constant " + name)
	}
	return consts.Offset(o)
}

// rows addresses the X activation rows: row r at p0 + r*xs for r < 4 and
// p1 = p0 + 4*xs beyond.
type rows struct {
	p0, p1, xs, xs3 GPVirtual
	x               int
}

func loadRows(x int) rows {
	r := rows{x: x, p0: Load(Param("x"), GP64()).(GPVirtual)}
	if x > 1 {
		r.xs = Load(Param("xstride"), GP64()).(GPVirtual)
		r.xs3 = GP64()
		LEAQ(Mem{Base: r.xs, Index: r.xs, Scale: 2}, r.xs3)
	}
	if x > 4 {
		r.p1 = GP64()
		LEAQ(Mem{Base: r.p0, Index: r.xs, Scale: 4}, r.p1)
	}
	return r
}

func (r rows) at(i, disp int) Mem {
	b := r.p0
	if i >= 4 {
		b, i = r.p1, i-4
	}
	switch i {
	case 0:
		return Mem{Base: b, Disp: disp}
	case 1:
		return Mem{Base: b, Index: r.xs, Scale: 1, Disp: disp}
	case 2:
		return Mem{Base: b, Index: r.xs, Scale: 2, Disp: disp}
	}
	return Mem{Base: b, Index: r.xs3, Scale: 1, Disp: disp}
}

func (r rows) advance() {
	ADDQ(U32(q8kBytes), r.p0)
	if r.x > 4 {
		ADDQ(U32(q8kBytes), r.p1)
	}
}

// hsum8 reduces the 8 lanes of acc as hsum_float_8 into the low lane of dst.
func hsum8(acc VecVirtual, dst VecVirtual) {
	t := XMM()
	if evex {
		VEXTRACTF32X4(U8(1), acc, dst)
	} else {
		VEXTRACTF128(U8(1), acc, dst)
	}
	VADDPS(acc.AsX(), dst, dst)
	VMOVHLPS(dst, dst, t)
	VADDPS(t, dst, dst)
	VMOVSHDUP(dst, t)
	VADDSS(t, dst, dst)
}

// hsum4 is (m0+m2)+(m1+m3) of m into its low lane.
func hsum4(m VecVirtual) {
	t := XMM()
	VMOVHLPS(m, m, t)
	VADDPS(t, m, m)
	VMOVSHDUP(m, t)
	VADDSS(t, m, m)
}

// evex is set while the AVX-512 kernels are emitted: avo v0.6.0 may give
// any virtual vector register X16-X31, which VEX-only instructions cannot
// encode, so those use EVEX forms (AVX512VL/DQ) or a fixed low register.
var evex bool

// prefetchDist is how far ahead of the current super-block the one-row dots
// prefetch weights. Decode streams each weight row once from DRAM, and one
// row (1-3 KiB) is too short for the hardware prefetcher to ramp up on;
// rows are contiguous, so prefetching past a row's end fetches the next one
// (the next call). A prefetch never faults, so reading past the matrix is
// harmless. Measured best in 1-4 KiB on the 2-core AVX-512 host.
// The rows kernels take the distance as their pf argument instead
// (runtime/tune measures it per shape; cpukern.DefaultPrefetch is this).
var prefetchDist = 2048

// prefetchW prefetches the cache lines of one block of b bytes prefetchDist
// ahead of w, or pf bytes ahead in a rows kernel (x > 4: the prefill tile
// rereads the weights from cache; skip).
func prefetchW(w Register, b, x int) {
	if x > 4 || prefetchDist == 0 {
		return
	}
	if cur != nil {
		pf := Load(Param("pf"), GP64()) // from the frame each block: no register held across the loop
		for o := 0; o < b; o += 64 {
			PREFETCHT0(Mem{Base: w, Index: pf, Scale: 1, Disp: o})
		}
		return
	}
	for o := 0; o < b; o += 64 {
		PREFETCHT0(Mem{Base: w, Disp: prefetchDist + o})
	}
}

// smallX are the activation-row counts of the small tiles (cpukern.SmallTile),
// largest first. Like the one-row dots they prefetch weights (prefetchW):
// a few decode streams still read each weight row from DRAM.
var smallX = []int{4, 2}

const sig = "func(nb int, w *byte, x *byte, xstride int, out *float32)"

// sigRows is the decode kernels' (cpukern.Rows): one activation row
// against rows weight rows wstride bytes apart, prefetching pf bytes ahead.
const sigRows = "func(nb int, w *byte, wstride int, x *byte, rows int, out *float32, pf int)"

func doc(name, what string, x int) {
	if isRows(name) {
		if x != 1 {
			panic(name + ": a rows kernel has one activation row")
		}
		TEXT(name, NOSPLIT, sigRows)
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[j], j < rows, to the %s dot of the nb-super-block weight row w+j*wstride with activation row x, prefetching weights pf bytes ahead.", name, what))
		return
	}
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape") // lets direct calls pass a local out without a heap allocation
	Doc(fmt.Sprintf("%s sets out[r], r < %d, to the %s dot of the nb-super-block weight row w with activation row x+r*xstride.", name, x, what))
}

func isRows(name string) bool { return strings.Contains(name, "Rows") }

// rowsLoop is the outer loop of a rows kernel while it is emitted: the
// one-row body runs once per weight row, one call per decode task instead
// of one per row (no Go wrapper, bounds check or dispatch per row).
type rowsLoop struct {
	name            string
	out, rows, wrow GPVirtual
}

var cur *rowsLoop

// begin opens the kernel's row loop (rows kernels) and returns the
// current weight row's pointer; the body loads nb and its activation rows
// after it, so each row starts afresh.
func begin(name string) (nb, w GPVirtual) {
	if isRows(name) {
		cur = &rowsLoop{name: name}
		cur.out = Load(Param("out"), GP64()).(GPVirtual)
		cur.rows = Load(Param("rows"), GP64()).(GPVirtual)
		cur.wrow = Load(Param("w"), GP64()).(GPVirtual)
		TESTQ(cur.rows, cur.rows)
		JZ(LabelRef(name + "_end"))
		Label(name + "_row")
		nb = Load(Param("nb"), GP64()).(GPVirtual)
		w = GP64()
		MOVQ(cur.wrow, w)
		return nb, w
	}
	return Load(Param("nb"), GP64()).(GPVirtual), Load(Param("w"), GP64()).(GPVirtual)
}

// outPtr is where finish writes: the rows kernel's running pointer.
func outPtr() GPVirtual {
	if cur != nil {
		return cur.out
	}
	return Load(Param("out"), GP64()).(GPVirtual)
}

// ret ends the kernel: a rows kernel first steps to the next weight row.
func ret() {
	if cur != nil {
		ADDQ(U8(4), cur.out)
		ws := Load(Param("wstride"), GP64())
		ADDQ(ws, cur.wrow)
		DECQ(cur.rows)
		JNZ(LabelRef(cur.name + "_row"))
		Label(cur.name + "_end")
		cur = nil
	}
	VZEROUPPER()
	RET()
}

// kq is Q4_K or, five, Q5_K (same scales, a fifth bit per quant in qh).
// repack is Q4_K in the order of ggml's repacked q4_K_8x8 kernels: whole
// block sums in scalars instead of the eight lanes.
type kq struct {
	order  string
	bytes  int
	qs     int // offset of the nibbles
	five   bool
	repack bool
}

var (
	kQ4   = kq{"DotQ4_KAVX2", q4kBytes, 16, false, false}
	kQ5   = kq{"DotQ5_KAVX2", q5kBytes, 48, true, false}
	kQ4r8 = kq{"DotQ4_KRepack8x8", q4kBytes, 16, false, true}
)

// q4k emits t's AVX2 order for x rows.
func q4k(name string, t kq, x int) {
	doc(name, t.order, x)
	frame := AllocLocal(48 * x) // per row: acc 8 floats, acc_m 4 floats
	nb, w := begin(name)
	r := loadRows(x)
	z := YMM()
	VXORPS(z, z, z)
	for i := 0; i < x; i++ {
		VMOVUPS(z, frame.Offset(48*i))
		VMOVUPS(z.AsX(), frame.Offset(48*i+32))
	}
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	{
		prefetchW(w, t.bytes, x)
		scales := q4kScales(w) // 16 words: scales, mins
		mins := XMM()
		VEXTRACTI128(U8(1), scales, mins)
		VINSERTI128(U8(1), scales.AsX(), scales, scales)

		sumi := make([]VecVirtual, x)
		for i := range sumi {
			sumi[i] = YMM()
			VPXOR(sumi[i], sumi[i], sumi[i])
		}
		for j := 0; j < 4; j++ {
			ql, qh, sl, sh, p := YMM(), YMM(), YMM(), YMM(), YMM()
			VMOVDQU(Mem{Base: w, Disp: t.qs + 32*j}, qh)
			VPAND(c("m4"), qh, ql)
			VPSRLW(U8(4), qh, qh)
			VPAND(c("m4"), qh, qh)
			if t.five { // bit 2j (low) and 2j+1 (high) of qh[l], as bit 4
				for h, q := range []VecVirtual{ql, qh} {
					VMOVDQU(Mem{Base: w, Disp: 16}, p)
					if b := 2*j + h; b > 0 {
						VPSRLW(U8(b), p, p)
					}
					VPAND(c("one8"), p, p)
					VPSLLW(U8(4), p, p)
					VPOR(p, q, q)
				}
			}
			VPSHUFB(c(fmt.Sprintf("k4s%d", 2*j)), scales, sl)
			VPSHUFB(c(fmt.Sprintf("k4s%d", 2*j+1)), scales, sh)
			for i := 0; i < x; i++ {
				VPMADDUBSW(r.at(i, 4+64*j), ql, p)
				maddAdd(p, sl, sumi[i])
				VPMADDUBSW(r.at(i, 36+64*j), qh, p)
				maddAdd(p, sh, sumi[i])
			}
		}
		q4kEpilogue(frame, w, r, mins, sumi, t)
		ADDQ(U32(t.bytes), w)
		r.advance()
		DECQ(nb)
		JNZ(LabelRef(name + "_blk"))
	}
	Label(name + "_done")
	if t.repack && x == 8 {
		finish(frame, x, -8)
		return
	}
	finish(frame, x, minsOf(t))
}

// minsOf is the finish mode of t: 4 mins lanes for Q4_K, Q5_K's scalar,
// -1 for the repack order's two scalars.
func minsOf(t kq) int {
	switch {
	case t.repack:
		return -1
	case t.five:
		return 1
	}
	return 4
}

// q4kEpilogue folds one block's integer lanes sumi[i] (and the mins) into
// row i's f32 accumulators in the frame: acc = fma(d, float(sumi), acc),
// acc_m = fma(-dmin, float(mins·bsum pairs), acc_m); for Q5_K (five) the
// four lanes' integer sum into the scalar summs = fma(-dmin, float, summs).
func q4kEpilogue(frame Mem, w Register, r rows, mins VecVirtual, sumi []VecVirtual, t kq) {
	if t.repack && len(sumi) == 8 && !evex {
		repackEpilogue8(frame, w, r, mins, sumi)
		return
	}
	if t.repack {
		repackEpilogue(frame, w, r, mins, sumi)
		return
	}
	five := t.five
	{
		wd := XMM() // [d, dmin] of the weight block
		VMOVSS(Mem{Base: w}, wd)
		VCVTPH2PS(wd, wd)
		for i := range sumi {
			dd, q8s, acc, dv := XMM(), XMM(), YMM(), YMM()
			VBROADCASTSS(r.at(i, 0), dd)
			VMULPS(wd, dd, dd)         // y.d·d, y.d·dmin
			VXORPS(c("sign"), dd, q8s) // -(y.d·dmin) in lane 1
			VSHUFPS(U8(0x55), q8s, q8s, q8s)
			VBROADCASTSS(dd, dv)
			// mins: _mm_madd_epi16(mins, _mm_hadd_epi16(bsums lo, hi))
			var m Register = XMM()
			if evex {
				m = X0 // VPHADDW has no EVEX form: keep it in X0-X15
			}
			VMOVDQU(r.at(i, 260), m)
			VPHADDW(r.at(i, 276), m, m)
			VPMADDWD(m, mins, m)
			am := XMM()
			if five {
				t := XMM()
				VPSHUFD(U8(0x4e), m, t)
				VPADDD(t, m, m)
				VPSHUFD(U8(0xb1), m, t)
				VPADDD(t, m, m)
				VCVTDQ2PS(m, m)
				VMOVSS(frame.Offset(48*i+32), am)
				VFMADD231SS(m, q8s, am)
				VMOVSS(am, frame.Offset(48*i+32))
			} else {
				VCVTDQ2PS(m, m)
				VMOVUPS(frame.Offset(48*i+32), am)
				VFMADD231PS(m, q8s, am)
				VMOVUPS(am, frame.Offset(48*i+32))
			}
			VCVTDQ2PS(sumi[i], sumi[i])
			VMOVUPS(frame.Offset(48*i), acc)
			VFMADD231PS(sumi[i], dv, acc)
			VMOVUPS(acc, frame.Offset(48*i))
		}
	}
}

// hsumInt adds the int32 lanes of v (a ymm, or with four an xmm) into its
// low lane: integers, so any order.
func hsumInt(v VecVirtual, four bool) Register {
	x := v.AsX()
	if !four {
		hi := XMM()
		if evex {
			VEXTRACTI32X4(U8(1), v, hi)
		} else {
			VEXTRACTI128(U8(1), v, hi)
		}
		VPADDD(hi, x, hi)
		x = hi
	}
	t := XMM()
	VPSHUFD(U8(0x4e), x, t)
	VPADDD(t, x, x)
	VPSHUFD(U8(0xb1), x, t)
	VPADDD(t, x, x)
	return x
}

// repackEpilogue is ggml_gemv_q4_K_8x8_q8_K's per-block step for each row:
// acc = fma(float(Σ lanes), d·y.d, acc), accm = fma(float(Σ mins), dmin·y.d, accm).
func repackEpilogue(frame Mem, w Register, r rows, mins VecVirtual, sumi []VecVirtual) {
	wd := XMM()
	VMOVSS(Mem{Base: w}, wd)
	VCVTPH2PS(wd, wd)
	for i := range sumi {
		dd, dm := XMM(), XMM()
		VBROADCASTSS(r.at(i, 0), dd)
		VMULPS(wd, dd, dd) // y.d·d, y.d·dmin
		VMOVSHDUP(dd, dm)
		var m Register = XMM()
		if evex {
			m = X0 // VPHADDW has no EVEX form
		}
		VMOVDQU(r.at(i, 260), m)
		VPHADDW(r.at(i, 276), m, m)
		VPMADDWD(m, mins, m)
		m4 := XMM()
		if evex {
			VMOVDQA64(m, m4)
		} else {
			VMOVDQA(m, m4)
		}
		ms := hsumInt(m4, true)
		VCVTDQ2PS(ms, ms)
		am := XMM()
		VMOVSS(frame.Offset(48*i+32), am)
		VFMADD231SS(ms, dm, am)
		VMOVSS(am, frame.Offset(48*i+32))
		s := hsumInt(sumi[i], false)
		VCVTDQ2PS(s, s)
		acc := XMM()
		VMOVSS(frame.Offset(48*i), acc)
		VFMADD231SS(s, dd, acc)
		VMOVSS(acc, frame.Offset(48*i))
	}
}

// repackEpilogue8 is repackEpilogue for eight rows at once, transposed: the
// rows' block sums reduced together by VPHADDD trees into one vector
// [t0 … t7] (integers, so any grouping), the mins likewise, and the f32
// accumulators of the eight rows as one ymm each (frame 0 and 32): the same
// FMAs lane by lane. AVX2 only (VEX-only instructions throughout): the zmm
// prefill tile of this order is repackEpilogue2x8's.
func repackEpilogue8(frame Mem, w Register, r rows, mins VecVirtual, sumi []VecVirtual) {
	// block sums: pairs, quads, then the two 128-bit halves
	var a [4]VecVirtual
	for k := range a {
		a[k] = YMM()
		VPHADDD(sumi[2*k+1], sumi[2*k], a[k])
	}
	b0, b1 := YMM(), YMM()
	VPHADDD(a[1], a[0], b0) // rows 0-3 | their upper lanes
	VPHADDD(a[3], a[2], b1) // rows 4-7
	lo, t8 := YMM(), YMM()
	VPERM2I128(U8(0x20), b1, b0, lo)
	VPERM2I128(U8(0x31), b1, b0, t8)
	VPADDD(lo, t8, t8) // [t0 … t7]
	VCVTDQ2PS(t8, t8)

	// mins: rows k and k+4 share a ymm through _mm_hadd_epi16 and the madd
	// (whole-register definitions only: avo would keep a ymm whose xmm half
	// alone was written live across the loop)
	md := YMM()
	VMOVDQU(mins, frame.Offset(64))
	VBROADCASTI128(frame.Offset(64), md) // [mins | mins]
	var q [4]VecVirtual
	for k := range q {
		lo, hi := YMM(), YMM()
		VBROADCASTI128(r.at(k, 260), lo)
		VINSERTI128(U8(1), r.at(k+4, 260), lo, lo)
		VBROADCASTI128(r.at(k, 276), hi)
		VINSERTI128(U8(1), r.at(k+4, 276), hi, hi)
		VPHADDW(hi, lo, lo)
		VPMADDWD(lo, md, lo)
		q[k] = lo
	}
	e0, e1 := YMM(), YMM()
	VPHADDD(q[1], q[0], e0)
	VPHADDD(q[3], q[2], e1)
	VPHADDD(e1, e0, e0) // [m0 … m7]
	VCVTDQ2PS(e0, e0)

	// the rows' y.d, then d·y.d and dmin·y.d
	yd := YMM()
	VBROADCASTSS(r.at(0, 0), yd)
	for k := 1; k < 8; k++ {
		t := YMM()
		VBROADCASTSS(r.at(k, 0), t)
		VBLENDPS(U8(1<<k), t, yd, yd)
	}
	wd, dv, dm := XMM(), YMM(), YMM()
	VMOVSS(Mem{Base: w}, wd)
	VCVTPH2PS(wd, wd)
	VBROADCASTSS(wd, dv)
	VMOVSHDUP(wd, wd)
	VBROADCASTSS(wd, dm)
	VMULPS(yd, dv, dv)
	VMULPS(yd, dm, dm)
	acc := YMM()
	VMOVUPS(frame, acc)
	VFMADD231PS(t8, dv, acc)
	VMOVUPS(acc, frame)
	VMOVUPS(frame.Offset(32), acc)
	VFMADD231PS(e0, dm, acc)
	VMOVUPS(acc, frame.Offset(32))
}

// finish writes out[i] = (0 + hsum_float_8(acc)) plus, for mins 4,
// ((m0+m2)+(m1+m3)) of the mins lanes or, for mins 1, the scalar summs.
func finish(frame Mem, x int, mins int) {
	out := outPtr()
	stride := 32
	if mins != 0 {
		stride = 48
	}
	if mins == -8 { // repackEpilogue8's two vectors
		a := YMM()
		VMOVUPS(frame, a)
		VSUBPS(frame.Offset(32), a, a)
		VMOVUPS(a, Mem{Base: out})
		ret()
		return
	}
	if mins == -16 { // repackEpilogue2x8's two vectors
		a := ZMM()
		VMOVUPS(frame, a)
		VSUBPS(frame.Offset(64), a, a)
		VMOVUPS(a, Mem{Base: out})
		ret()
		return
	}
	for i := 0; i < x; i++ {
		if mins < 0 { // the repack order: acc - accm
			a := XMM()
			VMOVSS(frame.Offset(stride*i), a)
			VSUBSS(frame.Offset(stride*i+32), a, a)
			VMOVSS(a, Mem{Base: out, Disp: 4 * i})
			continue
		}
		acc, h, s := YMM(), XMM(), XMM()
		VMOVUPS(frame.Offset(stride*i), acc)
		hsum8(acc, h)
		VMOVSS(c("f0"), s)
		VADDSS(h, s, s)
		switch mins {
		case 4:
			m := XMM()
			VMOVUPS(frame.Offset(stride*i+32), m)
			hsum4(m)
			VADDSS(m, s, s)
		case 1:
			VADDSS(frame.Offset(stride*i+32), s, s)
		}
		VMOVSS(s, Mem{Base: out, Disp: 4 * i})
	}
	ret()
}

// q6k emits DotQ6_KAVX2 for x rows.
func q6k(name string, x int) {
	doc(name, "DotQ6_KAVX2", x)
	frame := AllocLocal(32 * x)
	nb, w := begin(name)
	r := loadRows(x)
	z := YMM()
	VXORPS(z, z, z)
	for i := 0; i < x; i++ {
		VMOVUPS(z, frame.Offset(32*i))
	}
	m32 := YMM()
	VMOVDQU(c("m32"), m32)
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	{
		prefetchW(w, q6kBytes, x)
		scales := XMM()
		VMOVDQU(Mem{Base: w, Disp: 192}, scales)
		sumi := make([]VecVirtual, x)
		for i := range sumi {
			sumi[i] = YMM()
			VPXOR(sumi[i], sumi[i], sumi[i])
		}
		for j := 0; j < 2; j++ {
			for k := 0; k < 4; k++ {
				// q = (ql nibble) | (qh 2 bits)<<4: ggml's q4_k
				q, h, sc, p, s := YMM(), YMM(), YMM(), YMM(), YMM()
				VMOVDQU(Mem{Base: w, Disp: 64*j + 32*(k%2)}, q)
				if k >= 2 {
					VPSRLW(U8(4), q, q)
				}
				VPAND(c("m4"), q, q)
				VMOVDQU(Mem{Base: w, Disp: 128 + 32*j}, h)
				if k > 0 {
					VPSRLW(U8(2*k), h, h)
				}
				VPAND(c("m2"), h, h)
				VPSLLW(U8(4), h, h)
				VPOR(h, q, q)
				VPSHUFB(c(fmt.Sprintf("s6s%d", 4*j+k)), scales, sc.AsX())
				VPMOVSXBW(sc.AsX(), sc)
				for i := 0; i < x; i++ {
					o := 4 + 128*j + 32*k
					VPMADDUBSW(r.at(i, o), q, p)
					VPMADDUBSW(r.at(i, o), m32, s)
					VPSUBW(s, p, p)
					maddAdd(p, sc, sumi[i])
				}
			}
		}
		q6kEpilogue(frame, w, r, sumi)
		ADDQ(U32(q6kBytes), w)
		r.advance()
		DECQ(nb)
		JNZ(LabelRef(name + "_blk"))
	}
	Label(name + "_done")
	finish(frame, x, 0)
}

// avxVNNI is set while the AVX-VNNI kernels are emitted: the AVX2 bodies
// (VEX, Y0-Y15) with maddAdd as one VEX VPDPWSSD.
var avxVNNI bool

// maddAdd is sum += _mm256_madd_epi16(p, s): VPMADDWD then VPADDD, or under
// avxVNNI one VPDPWSSD (non-saturating; exact integers, so the same lanes).
// p is clobbered on AVX2.
func maddAdd(p, s, sum VecVirtual) {
	if avxVNNI {
		vexvnni.VPDPWSSD(p, s, sum)
		return
	}
	VPMADDWD(p, s, p)
	VPADDD(p, sum, sum)
}

// q4kScales is ggml's utmp unpacking of the block's 12 scale bytes: the
// ymm of 16 words sc0..7, mn0..7.
func q4kScales(w Register) VecVirtual {
	u0, u1, u2, t, a := GP64(), GP64(), GP64(), GP64(), GP64()
	MOVL(Mem{Base: w, Disp: 4}, u0.As32())
	MOVL(Mem{Base: w, Disp: 8}, u1.As32())
	MOVL(Mem{Base: w, Disp: 12}, u2.As32())
	// utmp3 = ((u2>>4)&0x0f0f0f0f) | (((u1>>6)&0x03030303)<<4), utmp2 = u1&0x3f3f3f3f
	MOVL(u2.As32(), t.As32())
	SHRL(U8(4), t.As32())
	ANDL(U32(0x0f0f0f0f), t.As32())
	MOVL(u1.As32(), a.As32())
	SHRL(U8(6), a.As32())
	ANDL(U32(0x03030303), a.As32())
	SHLL(U8(4), a.As32())
	ORL(a.As32(), t.As32())
	SHLQ(U8(32), t)
	MOVL(u1.As32(), a.As32())
	ANDL(U32(0x3f3f3f3f), a.As32())
	ORQ(a, t) // mins 0..7
	// utmp1 = (u2&0x0f0f0f0f) | (((u0>>6)&0x03030303)<<4), utmp0 = u0&0x3f3f3f3f
	ANDL(U32(0x0f0f0f0f), u2.As32())
	MOVL(u0.As32(), a.As32())
	SHRL(U8(6), a.As32())
	ANDL(U32(0x03030303), a.As32())
	SHLL(U8(4), a.As32())
	ORL(a.As32(), u2.As32())
	SHLQ(U8(32), u2)
	ANDL(U32(0x3f3f3f3f), u0.As32())
	ORQ(u2, u0) // scales 0..7
	ms := XMM()
	VMOVQ(u0, ms)
	VPINSRQ(U8(1), t, ms, ms)
	scales := YMM()
	VPMOVZXBW(ms, scales)
	return scales
}

// fold512 adds the high 256 bits of each zmm lane vector onto its low
// half: int32 lane L of a 64-byte chunk is ggml's lane L mod 8.
func fold512(z []VecVirtual) []VecVirtual {
	out := make([]VecVirtual, len(z))
	for i, v := range z {
		hi := YMM()
		VEXTRACTI64X4(U8(1), v, hi)
		out[i] = YMM()
		VPADDD(hi, v.AsY(), out[i])
	}
	return out
}

// q4k512 is DotQ4_KAVX2 with AVX-512: one zmm holds a 32-byte chunk's low
// nibbles (sub-block 2j) and high nibbles (2j+1) against the 64 contiguous
// activation bytes, and VPDPWSSD does _mm256_madd_epi16 by the scale and
// the add in one step (exact integers, so the same lanes).
func q4k512(name string, t kq, x int) {
	if t.repack && x == 1 {
		q4kr8One512(name)
		return
	}
	doc(name, t.order, x)
	frame := AllocLocal(48 * x)
	nb, w := begin(name)
	r := loadRows(x)
	z := YMM()
	VXORPS(z, z, z)
	for i := 0; i < x; i++ {
		VMOVUPS(z, frame.Offset(48*i))
		VMOVUPS(z.AsX(), frame.Offset(48*i+32))
	}
	m4, srl := ZMM(), ZMM()
	VMOVDQU64(c("m4z"), m4)
	VMOVDQU64(c("srl04"), srl)
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	{
		prefetchW(w, t.bytes, x)
		scales := q4kScales(w)
		mins := XMM()
		VEXTRACTI32X4(U8(1), scales, mins)
		sumi := make([]VecVirtual, x)
		for i := range sumi {
			sumi[i] = ZMM()
			VPXORD(sumi[i], sumi[i], sumi[i])
		}
		for j := 0; j < 4; j++ {
			q, sc, p := ZMM(), ZMM(), ZMM()
			VBROADCASTI64X4(Mem{Base: w, Disp: t.qs + 32*j}, q)
			VPSRLVW(srl, q, q)
			VPANDD(m4, q, q)
			if t.five { // bits 2j, 2j+1 of qh[l] for the two halves
				VBROADCASTI64X4(Mem{Base: w, Disp: 16}, p)
				VPSRLVW(c(fmt.Sprintf("srl5_%d", j)), p, p)
				VPANDD(c("one8z"), p, p)
				VPSLLW(U8(4), p, p)
				VPORD(p, q, q)
			}
			VMOVDQU64(c(fmt.Sprintf("k4p%d", j)), sc) // the index, then the words
			VPERMW(scales.AsZ(), sc, sc)
			for i := 0; i < x; i++ {
				VPMADDUBSW(r.at(i, 4+64*j), q, p)
				VPDPWSSD(p, sc, sumi[i])
			}
		}
		q4kEpilogue(frame, w, r, mins, fold512(sumi), t)
		ADDQ(U32(t.bytes), w)
		r.advance()
		DECQ(nb)
		JNZ(LabelRef(name + "_blk"))
	}
	Label(name + "_done")
	finish(frame, x, minsOf(t))
}

// q4kScales512 is q4kScales in vector registers (constants k4u*): one
// VPERMW of the block's first 16 bytes as words, one shift and one mask
// give the low bits (words 0..15) and high bits (16..31) of sc0..7, mn0..7,
// and an OR of the halves joins them: the same 16 words, with a few short
// vector ops in place of the scalar chain and its GPR-to-vector moves.
func q4kScales512(w Register, idx, cnt, mask VecVirtual) VecVirtual {
	b := ZMM()
	VPMOVZXBW(Mem{Base: w}, b.AsY()) // words 16..31 zero
	VPERMW(b, idx, b)
	VPSRLVW(cnt, b, b)
	VPANDD(mask, b, b)
	hi, sc := YMM(), YMM()
	VEXTRACTI64X4(U8(1), b, hi)
	VPORD(hi, b.AsY(), sc)
	return sc
}

// q4kr8One512 is the repack order's one-row body (Dot1 and Rows, decode)
// in fewer instructions per block (decode runs it compute-bound): the
// scales unpacked in vectors (q4kScales512), the loop-invariant permutation
// indexes in registers, two VPDPWSSD chains, and one reduction for both the
// block sum and its mins term (the mins as one VPMADDWD of the 16 bsums by
// each min twice: the same integer as the hadd/madd, as a pair of Q8_K
// bsums never leaves int16). The two f32 accumulators are lanes 0 and 1 of
// one register, [acc, accm] = fma([s, m], [d·y.d, dmin·y.d], [acc, accm]):
// lane by lane the FMAs of repackEpilogue, and no frame round trip per
// block. (Two weight rows interleaved per block measured slower from DRAM:
// 13 against 17 GB/s on one thread, so Rows keeps one row at a time.)
func q4kr8One512(name string) {
	doc(name, kQ4r8.order, 1)
	nb, w := begin(name)
	x := Load(Param("x"), GP64()).(GPVirtual)
	acc := XMM()
	VXORPS(acc, acc, acc)
	m4, srl, ui, uc, um := ZMM(), ZMM(), ZMM(), ZMM(), ZMM()
	VMOVDQU64(c("m4z"), m4)
	VMOVDQU64(c("srl04"), srl)
	VMOVDQU64(c("k4u"), ui)
	VMOVDQU64(c("k4ucnt"), uc)
	VMOVDQU64(c("k4umask"), um)
	var pi [4]VecVirtual
	for j := range pi {
		pi[j] = ZMM()
		VMOVDQU64(c(fmt.Sprintf("k4p%d", j)), pi[j])
	}
	mi := YMM()
	VMOVDQU(c("k4mn2"), mi) // words 0..15: mn0,mn0,mn1,mn1,…
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	{
		prefetchW(w, q4kBytes, 1)
		scales := q4kScales512(w, ui, uc, um)
		var s [2]VecVirtual
		for j := 0; j < 4; j++ {
			q, sc, p := ZMM(), ZMM(), ZMM()
			VBROADCASTI64X4(Mem{Base: w, Disp: kQ4r8.qs + 32*j}, q)
			VPSRLVW(srl, q, q)
			VPANDD(m4, q, q)
			VPERMW(scales.AsZ(), pi[j], sc)
			VPMADDUBSW(Mem{Base: x, Disp: 4 + 64*j}, q, p)
			if j < 2 {
				s[j] = ZMM()
				VPMADDWD(p, sc, s[j])
			} else {
				VPDPWSSD(p, sc, s[j%2])
			}
		}
		// a: the block's 8-lane sum; b: its mins products
		a, b, md, lo, hi := YMM(), YMM(), YMM(), YMM(), YMM()
		VPADDD(s[1], s[0], s[0])
		VEXTRACTI64X4(U8(1), s[0], a)
		VPADDD(s[0].AsY(), a, a)
		VPERMW(scales, mi, md)
		VPMADDWD(Mem{Base: x, Disp: 260}, md, b)
		VPUNPCKLDQ(b, a, lo) // a0 b0 a1 b1 | a4 b4 a5 b5
		VPUNPCKHDQ(b, a, hi)
		VPADDD(hi, lo, lo)
		VPSHUFD(U8(0x4e), lo, hi)
		VPADDD(hi, lo, lo)
		t := XMM()
		VEXTRACTI32X4(U8(1), lo, t)
		VPADDD(lo.AsX(), t, t) // [Σa, Σb, …]
		VCVTDQ2PS(t, t)
		wd, dd := XMM(), XMM()
		VMOVSS(Mem{Base: w}, wd)
		VCVTPH2PS(wd, wd)
		VBROADCASTSS(Mem{Base: x}, dd)
		VMULPS(wd, dd, dd) // y.d·d, y.d·dmin
		VFMADD231PS(t, dd, acc)
		ADDQ(U32(q4kBytes), w)
		ADDQ(U32(q8kBytes), x)
		DECQ(nb)
		JNZ(LabelRef(name + "_blk"))
	}
	Label(name + "_done")
	out, m := outPtr(), XMM()
	VMOVSHDUP(acc, m)
	VSUBSS(m, acc, acc) // acc - accm
	VMOVSS(acc, Mem{Base: out})
	ret()
}

// repackEpilogue2x8 is repackEpilogue8 for the 2×8 tile, in zmm (every
// instruction EVEX, no fixed registers). sumi[8u+k] is weight row u against
// activation row k; each pair (0, k), (1, k) shares a zmm after folding its
// 16 lanes to 8, then an unpack tree sums each 8 into lane 8u+k of one
// vector (integers, so any grouping). The mins take the same tree: one
// VPMADDWD of row k's bsums by both weight rows' mins words (scales holds
// both rows' scale words, the second's at 16..31), the same integers as
// the hadd/madd. The rows' y.d are gathered at yoff (r*xstride), and one
// FMA per accumulator covers all sixteen outputs: the same FMAs lane by lane.
func repackEpilogue2x8(frame Mem, w []GPVirtual, r rows, yoff, scales VecVirtual, sumi []VecVirtual) {
	tree := func(v []VecVirtual) VecVirtual { // v[k]: pair (0, k) in lanes 0-7, (1, k) in 8-15
		var u [4]VecVirtual
		for k := range u {
			lo, hi := ZMM(), ZMM()
			VPUNPCKLDQ(v[2*k+1], v[2*k], lo)
			VPUNPCKHDQ(v[2*k+1], v[2*k], hi)
			u[k] = ZMM()
			VPADDD(hi, lo, u[k])
		}
		var q [2]VecVirtual
		for k := range q {
			lo, hi := ZMM(), ZMM()
			VPUNPCKLQDQ(u[2*k+1], u[2*k], lo)
			VPUNPCKHQDQ(u[2*k+1], u[2*k], hi)
			q[k] = ZMM()
			VPADDD(hi, lo, q[k]) // per 128-bit lane: rows 4k..4k+3 (weight row 1 above)
		}
		a, b, t := ZMM(), ZMM(), ZMM()
		VSHUFI64X2(U8(0x88), q[1], q[0], a) // q0.L0 q0.L2 q1.L0 q1.L2
		VSHUFI64X2(U8(0xdd), q[1], q[0], b) // q0.L1 q0.L3 q1.L1 q1.L3
		VPADDD(b, a, t)                     // outputs 0-3, 8-11, 4-7, 12-15
		VSHUFI64X2(U8(0xd8), t, t, t)       // outputs 0-15
		VCVTDQ2PS(t, t)
		return t
	}
	s := make([]VecVirtual, 8)
	for k := range s {
		lo, hi := ZMM(), ZMM()
		VSHUFI64X2(U8(0x44), sumi[k+8], sumi[k], lo)
		VSHUFI64X2(U8(0xee), sumi[k+8], sumi[k], hi)
		s[k] = ZMM()
		VPADDD(hi, lo, s[k])
	}
	t16 := tree(s)
	md := ZMM()
	VMOVDQU64(c("k4mn2"), md)
	VPERMW(scales, md, md)
	for k := range s {
		b := ZMM()
		VBROADCASTI64X4(r.at(k, 260), b)
		VPMADDWD(md, b, b)
		s[k] = b
	}
	m16 := tree(s)
	yd := ZMM()
	VPXORD(yd, yd, yd)
	KXNORW(K1, K1, K1)
	VPGATHERDD(Mem{Base: r.p0, Index: yoff, Scale: 1}, K1, yd)
	// [d, dmin] of each weight row, broadcast over its eight lanes
	dv, dm := ZMM(), ZMM()
	for u, wu := range w {
		wd, hv, hm := XMM(), YMM(), YMM()
		VMOVSS(Mem{Base: wu}, wd)
		VCVTPH2PS(wd, wd)
		if u == 0 {
			VBROADCASTSS(wd, dv)
			VMOVSHDUP(wd, wd)
			VBROADCASTSS(wd, dm)
			continue
		}
		VBROADCASTSS(wd, hv)
		VMOVSHDUP(wd, wd)
		VBROADCASTSS(wd, hm)
		VINSERTF64X4(U8(1), hv, dv, dv)
		VINSERTF64X4(U8(1), hm, dm, dm)
	}
	VMULPS(yd, dv, dv)
	VMULPS(yd, dm, dm)
	acc := ZMM()
	VMOVUPS(frame, acc)
	VFMADD231PS(t16, dv, acc)
	VMOVUPS(acc, frame)
	VMOVUPS(frame.Offset(64), acc)
	VFMADD231PS(m16, dm, acc)
	VMOVUPS(acc, frame.Offset(64))
}

// sig2 is the 2×8 tile's: out[8u+r] is weight row w+u*wstride (u < 2)
// against activation row x+r*xstride.
const sig2 = "func(nb int, w *byte, wstride int, x *byte, xstride int, out *float32)"

// q4kr8Tile2x8 is the repack order for two weight rows and eight
// activation rows: each activation chunk loaded once for both weight rows
// (half the activation traffic of two 1×8 passes, which read them from
// L2 in prefill), the two rows' decoded chunks and scale words live, and
// repackEpilogue2x8's zmm epilogue with lane 8u+r for weight row u.
func q4kr8Tile2x8(name string) {
	TEXT(name, NOSPLIT, sig2)
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[8u+r], u < 2, r < 8, to the DotQ4_KRepack8x8 dot of the nb-super-block weight row w+u*wstride with activation row x+r*xstride.", name))
	frame := AllocLocal(128)
	nb := Load(Param("nb"), GP64()).(GPVirtual)
	w0 := Load(Param("w"), GP64()).(GPVirtual)
	w1 := GP64()
	MOVQ(w0, w1)
	ADDQ(Load(Param("wstride"), GP64()), w1)
	r := loadRows(8)
	z := ZMM()
	VPXORD(z, z, z)
	VMOVDQU64(z, frame)
	VMOVDQU64(z, frame.Offset(64))
	m4, srl, yoff := ZMM(), ZMM(), ZMM()
	VMOVDQU64(c("m4z"), m4)
	VMOVDQU64(c("srl04"), srl)
	VPBROADCASTD(r.xs.As32(), yoff)
	VPMULLD(c("iota8x2"), yoff, yoff)
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	{
		ws := []GPVirtual{w0, w1}
		scales := []VecVirtual{q4kScales(w0), q4kScales(w1)}
		sumi := make([]VecVirtual, 16)
		for i := range sumi {
			sumi[i] = ZMM()
			VPXORD(sumi[i], sumi[i], sumi[i])
		}
		for j := 0; j < 4; j++ {
			var q, sc [2]VecVirtual
			for u := range q {
				q[u], sc[u] = ZMM(), ZMM()
				VBROADCASTI64X4(Mem{Base: ws[u], Disp: kQ4r8.qs + 32*j}, q[u])
				VPSRLVW(srl, q[u], q[u])
				VPANDD(m4, q[u], q[u])
				VMOVDQU64(c(fmt.Sprintf("k4p%d", j)), sc[u])
				VPERMW(scales[u].AsZ(), sc[u], sc[u])
			}
			for i := 0; i < 8; i++ {
				a := ZMM()
				VMOVDQU64(r.at(i, 4+64*j), a)
				for u := range q {
					p := ZMM()
					VPMADDUBSW(a, q[u], p)
					VPDPWSSD(p, sc[u], sumi[8*u+i])
				}
			}
		}
		sz := ZMM()
		VINSERTI64X4(U8(1), scales[1], scales[0].AsZ(), sz)
		repackEpilogue2x8(frame, ws, r, yoff, sz, sumi)
		ADDQ(U32(q4kBytes), w0)
		ADDQ(U32(q4kBytes), w1)
		r.advance()
		DECQ(nb)
		JNZ(LabelRef(name + "_blk"))
	}
	Label(name + "_done")
	finish(frame, 16, -16)
}

// q6k512 is DotQ6_KAVX2 with AVX-512: 64 values per zmm (ql's 64 bytes
// give values 0..63 of a half by their low nibbles and 64..127 by their
// high ones), VPDPWSSD for the scale madd and add.
func q6k512(name string, x int) {
	if x == 1 {
		q6kOne512(name)
		return
	}
	doc(name, "DotQ6_KAVX2", x)
	frame := AllocLocal(32 * x)
	nb, w := begin(name)
	r := loadRows(x)
	z := YMM()
	VXORPS(z, z, z)
	for i := 0; i < x; i++ {
		VMOVUPS(z, frame.Offset(32*i))
	}
	m4, m2, m32 := ZMM(), ZMM(), ZMM()
	VMOVDQU64(c("m4z"), m4)
	VMOVDQU64(c("m2z"), m2)
	VMOVDQU64(c("m32z"), m32)
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	{
		prefetchW(w, q6kBytes, x)
		sc16 := ZMM()
		VPMOVSXBW(Mem{Base: w, Disp: 192}, sc16.AsY()) // 16 words
		sumi := make([]VecVirtual, x)
		for i := range sumi {
			sumi[i] = ZMM()
			VPXORD(sumi[i], sumi[i], sumi[i])
		}
		for j := 0; j < 2; j++ {
			ql, qh := ZMM(), ZMM()
			VMOVDQU64(Mem{Base: w, Disp: 64 * j}, ql)
			VBROADCASTI64X4(Mem{Base: w, Disp: 128 + 32*j}, qh)
			for half := 0; half < 2; half++ { // values 128j+64half ..+63
				q, h, sc, p, s := ZMM(), ZMM(), ZMM(), ZMM(), ZMM()
				if half == 0 {
					VPANDD(m4, ql, q)
					VPSRLVW(c("srl02"), qh, h)
				} else {
					VPSRLW(U8(4), ql, q)
					VPANDD(m4, q, q)
					VPSRLVW(c("srl46"), qh, h)
				}
				VPANDD(m2, h, h)
				VPSLLW(U8(4), h, h)
				VPORD(h, q, q)
				VMOVDQU64(c(fmt.Sprintf("s6p%d", 2*j+half)), sc)
				VPERMW(sc16, sc, sc)
				for i := 0; i < x; i++ {
					o := 4 + 128*j + 64*half
					VPMADDUBSW(r.at(i, o), q, p)
					VPMADDUBSW(r.at(i, o), m32, s)
					VPSUBW(s, p, p)
					VPDPWSSD(p, sc, sumi[i])
				}
			}
		}
		q6kEpilogue(frame, w, r, fold512(sumi))
		ADDQ(U32(q6kBytes), w)
		r.advance()
		DECQ(nb)
		JNZ(LabelRef(name + "_blk"))
	}
	Label(name + "_done")
	finish(frame, x, 0)
}

// q6kOne512 is q6k512's one-row body (Dot1 and Rows, decode) in fewer
// instructions per block: the qh bits masked in place and shifted to bits
// 4-5, so one VPTERNLOGD ORs them onto the masked nibbles (three or four
// ops where there were five or six), the scale permutation indexes in
// registers, two VPDPWSSD chains (integers: the same lanes), and the eight
// f32 lanes in a register instead of the frame.
func q6kOne512(name string) {
	doc(name, "DotQ6_KAVX2", 1)
	nb, w := begin(name)
	x := Load(Param("x"), GP64()).(GPVirtual)
	acc := YMM()
	VXORPS(acc, acc, acc)
	m4, m32 := ZMM(), ZMM()
	VMOVDQU64(c("m4z"), m4)
	VMOVDQU64(c("m32z"), m32)
	var hm, hs, pi [4]VecVirtual
	for i := range pi {
		pi[i] = ZMM()
		VMOVDQU64(c(fmt.Sprintf("s6p%d", i)), pi[i])
	}
	for h := 0; h < 2; h++ {
		hm[h], hs[h] = ZMM(), ZMM()
		VMOVDQU64(c(fmt.Sprintf("q6hm%d", h)), hm[h])
		VMOVDQU64(c([]string{"sll42", "srl02"}[h]), hs[h])
	}
	TESTQ(nb, nb)
	JZ(LabelRef(name + "_done"))
	Label(name + "_blk")
	{
		prefetchW(w, q6kBytes, 1)
		sc16 := ZMM()
		VPMOVSXBW(Mem{Base: w, Disp: 192}, sc16.AsY()) // 16 words
		var s [2]VecVirtual
		for j := 0; j < 2; j++ {
			ql, qh := ZMM(), ZMM()
			VMOVDQU64(Mem{Base: w, Disp: 64 * j}, ql)
			VBROADCASTI64X4(Mem{Base: w, Disp: 128 + 32*j}, qh)
			for half := 0; half < 2; half++ { // values 128j+64half ..+63
				h, sc, p, m := ZMM(), ZMM(), ZMM(), ZMM()
				VPANDD(hm[half], qh, h)
				var lo VecVirtual = ql
				if half == 0 {
					VPSLLVW(hs[half], h, h) // bits 0-1 | 2-3 to 4-5
				} else {
					VPSRLVW(hs[half], h, h) // bits 4-5 | 6-7 to 4-5
					lo = ZMM()
					VPSRLW(U8(4), ql, lo)
				}
				q := h
				VPTERNLOGD(U8(0xf8), m4, lo, q) // q = h | (lo & m4)
				VPERMW(sc16, pi[2*j+half], sc)
				o := 4 + 128*j + 64*half
				VPMADDUBSW(Mem{Base: x, Disp: o}, q, p)
				VPMADDUBSW(Mem{Base: x, Disp: o}, m32, m)
				VPSUBW(m, p, p)
				if k := 2*j + half; k < 2 {
					s[k] = ZMM()
					VPMADDWD(p, sc, s[k])
				} else {
					VPDPWSSD(p, sc, s[k%2])
				}
			}
		}
		VPADDD(s[1], s[0], s[0])
		sumi := fold512(s[:1])[0]
		wd, d, dv := XMM(), XMM(), YMM()
		hb := GP32()
		MOVWLZX(Mem{Base: w, Disp: 208}, hb)
		VMOVD(hb, wd)
		VCVTPH2PS(wd, wd)
		VMULSS(Mem{Base: x}, wd, d)
		VBROADCASTSS(d, dv)
		VCVTDQ2PS(sumi, sumi)
		VFMADD231PS(sumi, dv, acc)
		ADDQ(U32(q6kBytes), w)
		ADDQ(U32(q8kBytes), x)
		DECQ(nb)
		JNZ(LabelRef(name + "_blk"))
	}
	Label(name + "_done")
	out, h, t := outPtr(), XMM(), XMM()
	hsum8(acc, h)
	VMOVSS(c("f0"), t)
	VADDSS(h, t, t)
	VMOVSS(t, Mem{Base: out})
	ret()
}

func main() {
	ConstraintExpr("amd64")
	constants()
	q4k("q4kDot1AVX2", kQ4, 1)
	q4k("q4kDot8AVX2", kQ4, 8)
	q4k("q5kDot1AVX2", kQ5, 1)
	q4k("q5kDot8AVX2", kQ5, 8)
	q4k("q4kr8Dot1AVX2", kQ4r8, 1)
	q4k("q4kr8Dot8AVX2", kQ4r8, 8)
	q6k("q6kDot1AVX2", 1)
	q6k("q6kDot8AVX2", 8)
	evex = true
	q4k512("q4kDot1VNNI", kQ4, 1)
	q4k512("q4kDot8VNNI", kQ4, 8)
	q4k512("q5kDot1VNNI", kQ5, 1)
	q4k512("q5kDot8VNNI", kQ5, 8)
	q4k512("q4kr8Dot1VNNI", kQ4r8, 1)
	q4kr8Tile2x8("q4kr8Tile2x8VNNI") // the repack order's prefill tile: no 1×8
	q6k512("q6kDot1VNNI", 1)
	q6k512("q6kDot8VNNI", 8)
	for _, x := range smallX { // cpukern.SmallTile: a few decode streams
		q4k512(fmt.Sprintf("q4kDot%dVNNI", x), kQ4, x)
		q4k512(fmt.Sprintf("q5kDot%dVNNI", x), kQ5, x)
		q4k512(fmt.Sprintf("q4kr8Dot%dVNNI", x), kQ4r8, x)
		q6k512(fmt.Sprintf("q6kDot%dVNNI", x), x)
	}
	evex = false
	q4k("q4kRowsAVX2", kQ4, 1)
	q4k("q5kRowsAVX2", kQ5, 1)
	q4k("q4kr8RowsAVX2", kQ4r8, 1)
	q6k("q6kRowsAVX2", 1)
	evex = true
	q4k512("q4kRowsVNNI", kQ4, 1)
	q4k512("q5kRowsVNNI", kQ5, 1)
	q4k512("q4kr8RowsVNNI", kQ4r8, 1)
	q6k512("q6kRowsVNNI", 1)
	// AVX-VNNI without AVX-512: the AVX2 kernels, VPDPWSSD for madd+add
	evex, avxVNNI = false, true
	for _, x := range []int{1, 8} {
		q4k(fmt.Sprintf("q4kDot%dAVXVNNI", x), kQ4, x)
		q4k(fmt.Sprintf("q5kDot%dAVXVNNI", x), kQ5, x)
		q4k(fmt.Sprintf("q4kr8Dot%dAVXVNNI", x), kQ4r8, x)
		q6k(fmt.Sprintf("q6kDot%dAVXVNNI", x), x)
	}
	q4k("q4kRowsAVXVNNI", kQ4, 1)
	q4k("q5kRowsAVXVNNI", kQ5, 1)
	q4k("q4kr8RowsAVXVNNI", kQ4r8, 1)
	q6k("q6kRowsAVXVNNI", 1)
	avxVNNI = false
	quantQ8K()
	Generate()
}

// quantQ8K emits quantize_row_q8_K_ref as quant.QuantizeRowX86 computes it,
// bit for bit: amax and the first value reaching it, iscale = -127/max,
// q = min(127, nearest_int(iscale·x)) kept to its low byte, bsums of the
// stored bytes, d = 1/iscale; an all-zero block is cleared.
func quantQ8K() {
	TEXT("quantQ8KAVX2", NOSPLIT, "func(nb int, x *float32, dst *byte)")
	Pragma("noescape")
	Doc("quantQ8KAVX2 quantizes nb blocks of 256 floats at x into Q8_K blocks at dst.")
	nb := Load(Param("nb"), GP64())
	x := Load(Param("x"), GP64())
	dst := Load(Param("dst"), GP64())
	TESTQ(nb, nb)
	JZ(LabelRef("q8k_done"))
	Label("q8k_blk")
	{
		// amax: VMAXPS keeps its second source when the first is NaN, as
		// the reference's "ax > amax" skips NaN
		abs := YMM()
		VMOVUPS(c("abs"), abs)
		m := make([]VecVirtual, 4)
		for i := range m {
			m[i] = YMM()
			VXORPS(m[i], m[i], m[i])
		}
		for g := 0; g < 32; g++ {
			t := YMM()
			VANDPS(Mem{Base: x, Disp: 32 * g}, abs, t)
			VMAXPS(m[g%4], t, m[g%4])
		}
		VMAXPS(m[1], m[0], m[0])
		VMAXPS(m[3], m[2], m[2])
		VMAXPS(m[2], m[0], m[0])
		h, t := XMM(), XMM()
		VEXTRACTF128(U8(1), m[0], h)
		VMAXPS(h, m[0].AsX(), h)
		VMOVHLPS(h, h, t)
		VMAXPS(t, h, h)
		VMOVSHDUP(h, t)
		VMAXSS(t, h, h)
		zero := XMM()
		VXORPS(zero, zero, zero)
		VUCOMISS(zero, h)
		JE(LabelRef("q8k_zero"))

		// the first index whose |x| is amax
		am := YMM()
		VBROADCASTSS(h, am)
		idx, mask := GP64(), GP32()
		XORQ(idx, idx)
		Label("q8k_find")
		{
			t := YMM()
			VANDPS(Mem{Base: x, Index: idx, Scale: 4}, abs, t)
			VCMPPS(U8(0), am, t, t) // EQ_OQ
			VMOVMSKPS(t, mask)
			TESTL(mask, mask)
			JNZ(LabelRef("q8k_found"))
			ADDQ(U8(8), idx)
			JMP(LabelRef("q8k_find"))
		}
		Label("q8k_found")
		bit := GP32()
		BSFL(mask, bit)
		ADDQ(bit.As64(), idx)
		mx, is, d := XMM(), XMM(), XMM()
		VMOVSS(Mem{Base: x, Index: idx, Scale: 4}, mx)
		VMOVSS(c("fm127"), is)
		VDIVSS(mx, is, is) // -127/max
		VMOVSS(c("f1"), d)
		VDIVSS(is, d, d) // 1/iscale
		VMOVSS(d, Mem{Base: dst})
		isv := YMM()
		VBROADCASTSS(is, isv)

		perm, one8 := YMM(), YMM()
		VMOVDQU(c("perm"), perm)
		VMOVDQU(c("one8"), one8)
		var half [2]VecVirtual // per 8 groups of 16: their int32 sums, hadd'ed
		var pair VecVirtual
		for g := 0; g < 8; g++ {
			var v [4]VecVirtual
			for a := range v {
				v[a] = YMM()
				VMULPS(Mem{Base: x, Disp: 128*g + 32*a}, isv, v[a])
				VADDPS(c("magic"), v[a], v[a])
				VPAND(c("mant"), v[a], v[a])
				VPSUBD(c("half22"), v[a], v[a])
				VPMINSD(c("i127"), v[a], v[a])
				VPAND(c("ff"), v[a], v[a]) // byte(int8(q)): the low byte
			}
			VPACKUSDW(v[1], v[0], v[0])
			VPACKUSDW(v[3], v[2], v[2])
			VPACKUSWB(v[2], v[0], v[0])
			VPERMD(v[0], perm, v[0])
			VMOVDQU(v[0], Mem{Base: dst, Disp: 4 + 32*g})
			// bsums of groups 2g (low lane) and 2g+1 (high lane)
			s := v[1]
			VPMADDUBSW(v[0], one8, s)
			VPMADDWD(c("one16"), s, s)
			switch g % 4 {
			case 0:
				pair = s
			case 1, 3:
				VPHADDD(s, pair, pair)
				if g%4 == 1 {
					half[g/4] = pair
				} else {
					VPHADDD(pair, half[g/4], half[g/4])
					// lanes [2k, …] | [2k+1, …] into group order
					VPERMD(half[g/4], perm, half[g/4])
				}
			case 2:
				pair = s
			}
		}
		VPACKSSDW(half[1], half[0], half[0]) // sums fit int16 exactly
		VPERMQ(U8(0xd8), half[0], half[0])
		VMOVDQU(half[0], Mem{Base: dst, Disp: 260})
		JMP(LabelRef("q8k_next"))
	}
	Label("q8k_zero")
	{
		z := YMM()
		VPXOR(z, z, z)
		for o := 0; o < 288; o += 32 {
			VMOVDQU(z, Mem{Base: dst, Disp: o})
		}
		MOVL(U32(0), Mem{Base: dst, Disp: 288})
	}
	Label("q8k_next")
	ADDQ(U32(1024), x)
	ADDQ(U32(q8kBytes), dst)
	DECQ(nb)
	JNZ(LabelRef("q8k_blk"))
	Label("q8k_done")
	VZEROUPPER()
	RET()
}

// q6kEpilogue is acc = fma(y.d·d, float(sumi), acc) for each row.
func q6kEpilogue(frame Mem, w Register, r rows, sumi []VecVirtual) {
	wd := XMM()
	hb := GP32()
	MOVWLZX(Mem{Base: w, Disp: 208}, hb)
	VMOVD(hb, wd)
	VCVTPH2PS(wd, wd)
	for i := range sumi {
		d, dv, acc := XMM(), YMM(), YMM()
		VMULSS(r.at(i, 0), wd, d)
		VBROADCASTSS(d, dv)
		VCVTDQ2PS(sumi[i], sumi[i])
		VMOVUPS(frame.Offset(32*i), acc)
		VFMADD231PS(sumi[i], dv, acc)
		VMOVUPS(acc, frame.Offset(32*i))
	}
}
