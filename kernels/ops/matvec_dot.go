package ops

import (
	"cmp"
	"fmt"
	"strings"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Integer warp mat-vecs: the activation quantized to its partner type's
// bytes on the device (QuantizeQ8_K: int8 quants and a scale a block of
// 256; QuantizeQ8_0: a block of 32), the weight
// quants multiplied with them four at a time (k.Dot4, the GPU's dp4a) and
// summed in integers per sub-block, as ggml's k-quant dots do; only each
// unit's scaled partial is a float, summed over the warp. Against
// MatVecWarpNAME (decoded weights times the decoded activation, a float
// product a value) this reads a quarter of the activation bytes and issues
// a fraction of the instructions; the integer sums are the CPU's exactly,
// the float order is the warp's.

// QuantizeQ8_K is QuantizeQ8_K(x []float32, xq []byte, xd []float32): each
// block of 256 values of x quantized as QuantRoundQ8_K quantizes it
// (quantQ8_K: ggml's quantize_row_q8_K), the int8 quants into xq (their bytes) and the
// scale d into xd (0 for a zero block, whose quants are 0).
func QuantizeQ8_K() *k.Kernel {
	b := k.New("QuantizeQ8_K")
	b.Doc("quantizes each block of 256 values of x to Q8_K: int8 quants into xq, the scale into xd.")
	x, xq, xd := b.Buffer("x", k.F32), b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	b.ParallelFor("blk", 0, xd.Len(), func(i k.Expr) {
		storeQuantized(b, 256, i, i.Mul(256), b.View("xb", x, i.Mul(256), 256).At, xq, xd)
	})
	b.Schedule("j", k.LoopSchedule{Threads: 256}) // a value a thread: three passes over the block
	return b.MustBuild()
}

// storeQuantized quantizes block i of qk values (value j is at(j)) as the
// CPU matmul quantizes an activation, to Q8_K (qk 256: zero blocks
// cleared) or Q8_0 (qk 32): the int8 quants into xq from base (i·qk), the
// scale (Q8_K's 1/iscale) into xd[i].
func storeQuantized(b *k.Builder, qk int, i, base k.Expr, at func(j any) k.Expr, xq, xd *k.Buf) {
	if qk == 256 {
		q, is, zero := quantQ8_K(b, at)
		b.For("j", 0, 256, func(j k.Expr) {
			b.Store(xq, base.Add(j), k.Select(zero, k.F(0), q(j)).Cvt(k.I32).Cvt(k.U8))
		})
		b.Store(xd, i, k.Select(zero, k.F(0), k.F(1).Div(is)))
		return
	}
	q, d := quantQ8_0(b, at)
	b.For("j", 0, 32, func(j k.Expr) { b.Store(xq, base.Add(j), q(j).Cvt(k.I32).Cvt(k.U8)) })
	b.Store(xd, i, d)
}

// RMSNormQuantize is RMSNormQuantize{Q8_K,Q8_0}(x, w []float32, xq []byte,
// xd []float32, eps float32): RMSNorm(x, w) (weighted, each of x's rows of
// len(w) values; a block never spans two) quantized
// as QuantizeQ8_K / QuantizeQ8_0 quantize it (qk 256 or 32), without the
// normalized row ever stored: a CTA of NormThreads a block, each CTA
// summing the whole row's squares itself (the row is a few KiB, read from
// L2), so the decode step's norm and its mat-vecs' activation quantizer
// are one launch. The quants and scales are those of RMSNormCTA and the
// quantizer in turn (the same tree over the row). A warp a block took 10.8
// µs for the 8B's 4096 values on the H200: 128 dependent f64 additions a
// lane.
func RMSNormQuantize(qk int) *k.Kernel {
	name := map[int]string{256: "RMSNormQuantizeQ8_K", 32: "RMSNormQuantizeQ8_0"}[qk]
	if name == "" {
		panic("RMSNormQuantize: qk is 256 (Q8_K) or 32 (Q8_0)")
	}
	b := k.New(name)
	b.Doc(fmt.Sprintf("quantizes RMSNorm(x)·w to blocks of %d (int8 quants into xq, scales into xd).", qk))
	x, w := b.Buffer("x", k.F32), b.Buffer("w", k.F32)
	xq, xd := b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	eps := b.Scalar("eps", k.F32)
	n := b.Let("n", w.Len()) // a row: x holds len(x)/len(w) of them
	b.ParallelFor("blk", 0, xd.Len(), func(i k.Expr) {
		base := b.Let("base", i.Mul(qk))
		row := b.Let("row", base.Div(n).Mul(n)) // the block's row's first value
		// the block's weights, which no launch writes, on their way into
		// shared memory before the wait for the kernel before (in a
		// decode step they come from DRAM, after the row's squares)
		b.Stage(w, base.Sub(row), qk, qk)
		ss := b.Sum("ss", k.F64, 0, n, func(j k.Expr) k.Expr {
			xj := b.Let("xj", x.At(row.Add(j)))
			return xj.Mul(xj).Cvt(k.F64)
		})
		mean := b.Let("mean", ss.Div(n.Cvt(k.F64)).Cvt(k.F32))
		scale := b.Let("scale", k.F(1).Div(mean.Add(eps).Sqrt()))
		// RMSNorm's bits: x·scale, then ·w
		y := func(j any) k.Expr { return x.At(base.Add(j)).Mul(scale).Mul(w.At(base.Sub(row).Add(j))) }
		storeQuantized(b, qk, i, base, y, xq, xd)
	})
	b.Schedule("ss_i", k.LoopSchedule{Threads: NormThreads, Unroll: 4}) // a thread's squares' loads in flight together
	b.Schedule("j", k.LoopSchedule{Threads: NormThreads})
	return b.MustBuild()
}

// dotUnit returns unit s of weight block blk dotted with the block's
// activation quants xb (a qk-byte window), unscaled by the activation's d:
// an F32.
type dotUnit func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr

// dotCut is a weight block of qk values (and its activation block: the
// same qk) in bytes, cut into units.
type dotCut struct {
	qk, bytes, units int
	unit             dotUnit
	// scales is the activation's scales a weight block (its quantizer's
	// blocks in one of the weight's): unit s is scaled by scale
	// s/(units/scales) of the block's
	scales int
	// scaled, set in place of unit where the activation has more scales
	// than the weight block has units, is unit s applying them itself:
	// xs(j) is the block's j-th activation scale
	scaled func(b *k.Builder, blk, xb *k.Buf, s k.Expr, xs func(j k.Expr) k.Expr) k.Expr
}

const lowNibbles, ones = 0x0f0f0f0f, 0x01010101

// word is the little-endian u32 at byte off of a byte window whose offset
// is only even: two aligned u16 loads.
func word(blk *k.Buf, off k.Expr) k.Expr {
	return blk.Aligned(k.U16, off).Cvt(k.U32).Or(blk.Aligned(k.U16, off.Add(2)).Cvt(k.U32).Shl(16))
}

func u32c(v uint32) k.Expr { return k.Const(k.U32, int(v)) }

func i32c(v int) k.Expr { return k.Const(k.I32, v) }

// dotQ4_KCut is Q4_K against a Q8_K activation (q4KUnit): the CPU's
// integer sums.
var dotQ4_KCut = dotCut{qk: 256, bytes: 144, units: 4, scales: 1, unit: func(b *k.Builder, blk, xb *k.Buf, j k.Expr) k.Expr {
	u := q4KUnit(b, blk, xb, j)
	byteI := func(v k.Expr, c int) k.Expr { return v.Shr(8 * c).And(0xff).Cvt(k.I32) }
	sum := b.Let("isum", u.slo.Mul(byteI(u.sc, 0)).Add(u.shi.Mul(byteI(u.sc, 1))))
	mins := b.Let("imin", u.blo.Mul(byteI(u.m, 0)).Add(u.bhi.Mul(byteI(u.m, 1))))
	return half(u.dm, 0).Mul(sum.Cvt(k.F32)).Sub(half(u.dm, 1).Mul(mins.Cvt(k.F32)))
}}

// dotQ4_KQ8_0Cut is dotQ4_KCut against an activation quantized to Q8_0
// (a scale a block of 32, so a sub-block: QuantizeQ8_0, or a producer
// that quantizes its own output so, AttentionBlockQ8_0): each sub-block's
// integer sums scaled by its own activation scale, as llama.cpp's CUDA
// k-quant dots take Q8_1. Not the CPU's bits (it quantizes to Q8_K).
var dotQ4_KQ8_0Cut = dotCut{qk: 256, bytes: 144, units: 4, scales: 8, scaled: func(b *k.Builder, blk, xb *k.Buf, j k.Expr, xs func(k.Expr) k.Expr) k.Expr {
	u := q4KUnit(b, blk, xb, j)
	byteF := func(v k.Expr, c int) k.Expr { return v.Shr(8 * c).And(0xff).Cvt(k.I32).Cvt(k.F32) }
	d, dmin := b.Let("d", half(u.dm, 0)), b.Let("dmin", half(u.dm, 1))
	sub := func(c int, sum, bsum k.Expr) k.Expr {
		return d.Mul(byteF(u.sc, c)).Mul(sum.Cvt(k.F32)).Sub(dmin.Mul(byteF(u.m, c)).Mul(bsum.Cvt(k.F32)))
	}
	return xs(j.Mul(2)).Mul(sub(0, u.slo, u.blo)).Add(xs(j.Mul(2).Add(1)).Mul(sub(1, u.shi, u.bhi)))
}}

// q4KUnitSums are a Q4_K unit's parts: the header's d and dmin word, its
// two sub-blocks' 6-bit scales and mins (bytes 0 and 1 of sc and m), and
// the integer sums of their quants times the activation's (slo, shi) and
// of the activation's quants alone (blo, bhi).
type q4KUnitSums struct{ dm, sc, m, slo, shi, blo, bhi k.Expr }

// q4KUnit is Q4_K unit j (4 a block): quant group j, its 32 bytes the
// values 64j..64j+31 (low nibbles, sub-block 2j) and 64j+32.. (high,
// 2j+1), as eight aligned words; the header (d, dmin and the twelve scale
// bytes) four aligned words, of which the unit unpacks only its two
// sub-blocks' scales and mins. (Units of 4 bytes of each group, 8 a block,
// unpacked all eight every unit: 2 TB/s on the 8B's 14336×4096 on the
// H200, bound by issue.)
func q4KUnit(b *k.Builder, blk, xb *k.Buf, j k.Expr) q4KUnitSums {
	dm := b.Let("dm", blk.Aligned(k.U32, 0))
	sw := [3]k.Expr{b.Let("sw0", blk.Aligned(k.U32, 4)), b.Let("sw1", blk.Aligned(k.U32, 8)), b.Let("sw2", blk.Aligned(k.U32, 12))}
	sc, m := scaleMinK4Pair(b, sw, j)
	g, g2 := b.Let("g", j.Mul(32)), b.Let("g2", j.Mul(64)) // the group's quants, its activation values
	slo, shi, blo, bhi := i32c(0), i32c(0), i32c(0), i32c(0)
	for c := 0; c < 8; c++ {
		q4 := b.Let("q4", blk.Aligned(k.U32, g.Add(16+4*c)))
		xlo := b.Let("xlo", xb.Aligned(k.U32, g2.Add(4*c)))
		xhi := b.Let("xhi", xb.Aligned(k.U32, g2.Add(32+4*c)))
		slo = b.Let("slo", k.Dot4(q4.And(u32c(lowNibbles)), xlo, slo))
		shi = b.Let("shi", k.Dot4(q4.Shr(4).And(u32c(lowNibbles)), xhi, shi))
		blo = b.Let("blo", k.Dot4(u32c(ones), xlo, blo))
		bhi = b.Let("bhi", k.Dot4(u32c(ones), xhi, bhi))
	}
	return q4KUnitSums{dm, sc, m, slo, shi, blo, bhi}
}

// scaleMinK4Pair is scaleMinK4 of sub-blocks 2j and 2j+1 (j an Int in
// [0, 4)) over the twelve scale bytes as three little-endian words: two
// 6-bit scales in the low two bytes of sc, the two mins in m's.
func scaleMinK4Pair(b *k.Builder, sw [3]k.Expr, j k.Expr) (sc, m k.Expr) {
	sh := b.Let("sh", j.And(1).Mul(16)) // the pair's half of each word
	w0, w1, w2 := b.Let("w0", sw[0].Shr(sh)), b.Let("w1", sw[1].Shr(sh)), b.Let("w2", sw[2].Shr(sh))
	lo := j.Lt(2) // sub-blocks 0-3: bytes j·2.. of words 0 and 1, six bits each
	sc = b.Let("sc", k.Select(lo, w0.And(u32c(0x3f3f)), w2.And(u32c(0x0f0f)).Or(w0.Shr(2).And(u32c(0x3030)))))
	m = b.Let("mn", k.Select(lo, w1.And(u32c(0x3f3f)), w2.Shr(4).And(u32c(0x0f0f)).Or(w1.Shr(2).And(u32c(0x3030)))))
	return sc, m
}

// half is half h (0 low, 1 high) of a U32 as an IEEE half widened to F32.
func half(w k.Expr, h int) k.Expr { return w.Shr(16 * h).And(0xffff).Cvt(k.U16).F16ToF32() }

// Q6_K unit s (8 a block): l = 4s..4s+3 of both 128-value halves n, the
// values 128n+32t+l (t = 0..3: ql, ql+32 low then high nibbles, with qh's
// bit pairs 2t) under scale 8n+2t+s/4.
var dotQ6_KCut = dotCut{256, 210, 8, func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr {
	l := b.Let("l", s.Mul(4))
	is := b.Let("is", s.Div(4))
	sum := i32c(0)
	for n := 0; n < 2; n++ {
		ql0 := b.Let("ql0", word(blk, l.Add(64*n)))
		ql32 := b.Let("ql32", word(blk, l.Add(64*n+32)))
		h := b.Let("h", word(blk, l.Add(128+32*n)))
		qs := [4]k.Expr{
			ql0.And(u32c(lowNibbles)).Or(h.And(u32c(0x03030303)).Shl(4)),
			ql32.And(u32c(lowNibbles)).Or(h.Shr(2).And(u32c(0x03030303)).Shl(4)),
			ql0.Shr(4).And(u32c(lowNibbles)).Or(h.Shr(4).And(u32c(0x03030303)).Shl(4)),
			ql32.Shr(4).And(u32c(lowNibbles)).Or(h.Shr(6).And(u32c(0x03030303)).Shl(4)),
		}
		for t, q := range qs {
			x := b.Let("x", xb.Aligned(k.U32, l.Add(128*n+32*t)))
			// (q − 32)·x, the offset taken out of the unsigned product
			st := k.Dot4(q, x, i32c(0)).Sub(k.Dot4(u32c(ones), x, i32c(0)).Mul(i32c(32)))
			sc := blk.I8(is.Add(192 + 8*n + 2*t)).Cvt(k.I32)
			sum = b.Let("isum", sum.Add(st.Mul(sc)))
		}
	}
	return blk.Aligned(k.U16, 208).F16ToF32().Mul(sum.Cvt(k.F32))
}, 1, nil}

// Q8_0 unit s (2 a block): quants 16s..16s+15 as four words, signed by
// signed: the weights' bytes offset by 128 into Dot4's unsigned operand,
// the offset's 128·Σx taken out again. (Eight 4-value units a block ran
// at 162–525 GB/s on the H200: a scale load and a float product a word.)
var dotQ8_0Cut = dotCut{32, 34, 2, func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr {
	l := b.Let("l", s.Mul(16))
	sum := i32c(0)
	for c := 0; c < 4; c++ {
		q := b.Let("q", word(blk, l.Add(2+4*c)).Xor(u32c(0x80808080)))
		x := b.Let("x", xb.Aligned(k.U32, l.Add(4*c)))
		sum = b.Let("isum", sum.Add(k.Dot4(q, x, i32c(0)).Sub(k.Dot4(u32c(ones), x, i32c(0)).Mul(i32c(128)))))
	}
	return blk.Aligned(k.U16, 0).F16ToF32().Mul(sum.Cvt(k.F32))
}, 1, nil}

// dotCuts are the integer warp mat-vecs' cuts by weight type name; their
// activations are Q8_K (blocks of 256) or Q8_0 (32), the weight's partner.
func dotCuts() map[string]dotCut {
	return map[string]dotCut{"Q4_K": dotQ4_KCut, "Q6_K": dotQ6_KCut, "Q8_0": dotQ8_0Cut}
}

// layoutCuts are the integer mat-vecs' cuts of the device layouts
// (Q6_KA), which DotMatVec takes by name but DotMatVecs leaves out: their
// matrices are a runtime/gpuexec repacking, not a GGUF type.
func layoutCuts() map[string]dotCut {
	return map[string]dotCut{"Q6_KA": dotQ6_KACut, "Q4_KQ8_0": dotQ4_KQ8_0Cut, "Q6_KAQ8_0": dotQ6_KAQ8_0Cut}
}

// QuantizeQ8_0 is QuantizeQ8_0(x []float32, xq []byte, xd []float32): each
// block of 32 values of x quantized as QuantRoundQ8_0 quantizes it, the
// int8 quants into xq and the f16-rounded scale into xd.
func QuantizeQ8_0() *k.Kernel {
	b := k.New("QuantizeQ8_0")
	b.Doc("quantizes each block of 32 values of x to Q8_0 (x86 rounding): int8 quants into xq, the scale into xd.")
	x, xq, xd := b.Buffer("x", k.F32), b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	b.ParallelFor("blk", 0, xd.Len(), func(i k.Expr) {
		storeQuantized(b, 32, i, i.Mul(32), b.View("xb", x, i.Mul(32), 32).At, xq, xd)
	})
	b.Schedule("j", k.LoopSchedule{Threads: WarpLanes})
	return b.MustBuild()
}

// DotMatVecs are the integer warp mat-vecs by weight type name,
// MatVecDotNAME(w, xq []byte, xd, y []float32): y[r] = row r of the matrix
// dotted with the quantized activation (xq, xd), a warp per row.
func DotMatVecs() map[string]func() *k.Kernel { return DotMatVecsRows("", 1) }

// DotMatVecsRows are DotMatVecs in a store form and with rows weight rows a
// warp (DotMatVec's shape {rows, a warp, no unroll}), by weight type name.
func DotMatVecsRows(form string, rows int) map[string]func() *k.Kernel {
	out := map[string]func() *k.Kernel{}
	for name := range dotCuts() {
		out[name] = func() *k.Kernel { return DotMatVec(form, name, DotShape{Rows: rows}) }
	}
	return out
}

// DotShape is how an integer mat-vec spreads a matrix over the GPU: Rows
// weight rows a group of Threads threads (a warp, 32, or a CTA of 64-1024
// whose partial sums meet in shared memory; 0 means 32), each thread
// taking Unroll of its units a trip (their loads in flight together; 0 or
// 1 one at a time). Rows and Threads are part of the sum's order (the
// tree), Unroll is not.
//
// Prefetch has each group prefetch its weight rows before it waits for
// the kernel before it (kernel.Prefetch; a target with dependent launches
// streams them while that kernel finishes): it never changes a result.
//
// Stage, where over 0, has each group copy its weight rows (each matrix's)
// into shared memory before that wait instead (kernel.Stage, at most Stage
// bytes a matrix; rows that do not fit are read where they lie): the
// whole first trip of a launch that fits in one wave arrives while the
// kernel before finishes. It never changes a result.
//
// Acts is the activation rows a launch multiplies (0 or 1: one): xq and xd
// hold Acts rows' quants and scales one row after another, y (and res)
// Acts rows of outputs, and a group reads each weight unit once for all of
// them (a verify step of speculative decoding, a few sequences' decode).
// Each row's sums are those of the one-row mat-vec, bit for bit.
type DotShape struct {
	Rows, Threads, Unroll int
	Prefetch              bool
	Stage                 int
	Acts                  int
	// Norm has the mat-vec take an RMSNorm's input unnormalized (x·w
	// quantized, NormPartQ8_0's) with the row's sums of squares in parts:
	// (…, xq, xd, ss, eps, …), each sum scaled by 1/sqrt(Σss/n + eps), n
	// the row's values, before its store form.
	Norm bool
}

// String is the shape's suffix of a kernel name: "x4" for 4 rows, "t128"
// for a CTA of 128, "u2" for two units a trip, "p" for the prefetch; ""
// for one row a warp.
func (sh DotShape) String() string {
	var b strings.Builder
	if sh.Rows > 1 {
		fmt.Fprintf(&b, "x%d", sh.Rows)
	}
	if sh.Threads != 0 && sh.Threads != WarpLanes {
		fmt.Fprintf(&b, "t%d", sh.Threads)
	}
	if sh.Unroll > 1 {
		fmt.Fprintf(&b, "u%d", sh.Unroll)
	}
	if sh.Prefetch {
		b.WriteString("p")
	}
	if sh.Stage > 0 {
		fmt.Fprintf(&b, "s%d", sh.Stage)
	}
	if sh.Acts > 1 {
		fmt.Fprintf(&b, "a%d", sh.Acts)
	}
	if sh.Norm {
		b.WriteString("n")
	}
	return b.String()
}

// DotMatVec is the integer mat-vec of weight type typ (a dotCuts name) in
// store form form and shape sh: MatVecDot<form><typ><sh>. The forms: ""
// plain, (w, xq, xd, y); "Add" the residual added, (w, xq, xd, res, y);
// "SiLU" the SiLU of each sum; "Mul" each sum times res (the SwiGLU's up
// projection times the gate's SiLU), (w, xq, xd, res, y); "SwiGLU" the
// gate's and the up projection's matrices at once, y = silu(wg·x)·(wu·x),
// (wg, wu, xq, xd, y): SiLU's then Mul's bits; "RopeKV" a stack of q, k
// and v projections (or a part of one) that rotates and caches its rows
// as it stores them, (w, xq, xd, y, kc, vc, step, freqs, nq, nk, headDim,
// dims, thetaScale, freqScale): ropeKVPair. With several
// rows a group the loads for its rows are in flight together and each
// activation unit is read once for all of them; len(y) must be a multiple
// of Rows (RopeKV: an even Rows). Every Rows gives the same bits (each row's sum folds in the same
// order); Threads changes the tree.
func DotMatVec(form, typ string, sh DotShape) *k.Kernel {
	st, ok := map[string]warpStore{"": plainStore, "Add": residualStore, "SiLU": siluStore, "Mul": mulStore, "SwiGLU": swigluStore, "RopeKV": ropeKVForm}[form]
	if !ok {
		panic("DotMatVec: no store form " + form)
	}
	c, ok := dotCuts()[typ]
	if !ok {
		c, ok = layoutCuts()[typ]
	}
	if !ok {
		panic("DotMatVec: no integer mat-vec for " + typ)
	}
	sh.Rows, sh.Threads = max(sh.Rows, 1), cmp.Or(sh.Threads, WarpLanes)
	if st == ropeKVForm && sh.Rows%2 != 0 {
		panic("DotMatVec: RopeKV takes rows in pairs")
	}
	if st == ropeKVForm && sh.Acts > 1 {
		panic("DotMatVec: RopeKV takes one activation row")
	}
	return matVecDot(typ, c, st, sh)
}

func matVecDot(name string, c dotCut, st warpStore, sh DotShape) *k.Kernel {
	rows := sh.Rows
	kname, doc := st.kernel("MatVecDot", name, "the quantized activation (xq, xd), in integers")
	kname += sh.String()
	switch {
	case sh.Threads > WarpLanes:
		doc = strings.Replace(doc, "one warp per row", fmt.Sprintf("a CTA of %d per %d rows", sh.Threads, rows), 1)
	case rows > 1:
		doc = strings.Replace(doc, "one warp per row", fmt.Sprintf("one warp per %d rows", rows), 1)
	}
	b := k.New(kname)
	b.Doc(doc)
	var ws []*k.Buf
	if st == swigluStore { // the gate's matrix and the up projection's, read by one group
		ws = []*k.Buf{b.Buffer("wg", k.U8), b.Buffer("wu", k.U8)}
	} else {
		ws = []*k.Buf{b.Buffer("w", k.U8)}
	}
	xq, xd := b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	var ss *k.Buf
	var eps k.Expr
	if sh.Norm {
		ss, eps = b.Buffer("ss", k.F32), b.Scalar("eps", k.F32)
	}
	res := st.residual(b)
	y := b.Buffer("y", k.F32)
	var rk ropeKVArgs
	if st == ropeKVForm {
		rk = ropeKVParams(b)
	}
	acts := max(sh.Acts, 1)
	nb, n := xd.Len(), y.Len()
	if acts > 1 {
		nb, n = nb.Div(acts), b.Let("n", n.Div(acts))
	}
	if c.scales > 1 {
		nb = nb.Div(c.scales)
	}
	nb = b.Let("nb", nb)
	rowBytes := b.Let("rowBytes", nb.Mul(c.bytes))
	// at is output row r's index in activation row a's outputs
	at := func(a int, r k.Expr) k.Expr {
		if a == 0 {
			return r
		}
		return n.Mul(a).Add(r)
	}
	b.ParallelFor("r", 0, n.Div(rows), func(g k.Expr) {
		for _, w := range ws { // the group's rows: weights, which no launch writes
			switch {
			case sh.Stage > 0:
				b.Stage(w, g.Mul(rows).Mul(rowBytes), rowBytes.Mul(rows), sh.Stage)
			case sh.Prefetch:
				b.Prefetch(w, g.Mul(rows).Mul(rowBytes), rowBytes.Mul(rows))
			}
		}
		sums := groupSums(b, "u", c, ws, xq, xd, nb, rowBytes, g.Mul(rows), rows, acts)
		get := func(v *k.Var) k.Expr { return v.Get() }
		if sh.Norm {
			scale := normScale(b, ss, eps, nb.Mul(c.qk))
			get = func(v *k.Var) k.Expr { return v.Get().Mul(scale) }
		}
		if st == ropeKVForm {
			for q := 0; q < rows; q += 2 {
				rk.pair(b, y, g.Mul(rows).Add(q), get(sums[0][q][0]), get(sums[0][q+1][0]))
			}
			return
		}
		for a := range sums {
			for q, sum := range sums[a] {
				r := at(a, g.Mul(rows).Add(q))
				if st == swigluStore {
					b.Store(y, r, silu(b, get(sum[0])).Mul(get(sum[1])))
					continue
				}
				st.store(b, y, res, r, get(sum[0]))
			}
		}
	})
	b.Schedule("u", k.LoopSchedule{Threads: sh.Threads, Unroll: sh.Unroll})
	if sh.Norm {
		b.Schedule("nss_i", k.LoopSchedule{Threads: sh.Threads})
	}
	return b.MustBuild()
}

// normScale is RMSNorm's 1/sqrt(mean + eps) of a row of n values whose
// sums of squares are in parts ss (NormPartQ8_0's, a block of 32 each),
// summed over the group's threads.
func normScale(b *k.Builder, ss *k.Buf, eps, n k.Expr) k.Expr {
	sum := b.Sum("nss", k.F32, 0, ss.Len(), func(j k.Expr) k.Expr { return ss.At(j) })
	mean := b.Let("mean", sum.Div(n.Cvt(k.F32)))
	return b.Let("scale", k.F(1).Div(mean.Add(eps).Sqrt()))
}

// NormPartQ8_0 is NormPartQ8_0(x, w []float32, xq []byte, xd, ss
// []float32): each block of 32 values of x times RMSNorm's weights w
// (x's rows of len(w) values) quantized as QuantizeQ8_0 quantizes, and
// the block's sum of squares of x into ss: an RMSNorm's input for mat-vecs
// that scale their sums by the norm themselves (DotShape.Norm), so the
// norm needs no launch of its own where the producer of x runs this as a
// CTA-local phase over the rows it computed.
func NormPartQ8_0() *k.Kernel {
	b := k.New("NormPartQ8_0")
	b.Doc("quantizes each block of 32 of x·w to Q8_0 (xq, xd) and sums its squares of x into ss.")
	x, w := b.Buffer("x", k.F32), b.Buffer("w", k.F32)
	xq, xd, ss := b.Buffer("xq", k.U8), b.Buffer("xd", k.F32), b.Buffer("ss", k.F32)
	n := b.Let("n", w.Len())
	b.ParallelFor("blk", 0, xd.Len(), func(i k.Expr) {
		base := b.Let("base", i.Mul(32))
		row := b.Let("row", base.Div(n).Mul(n))
		s := b.Sum("ps", k.F32, 0, 32, func(j k.Expr) k.Expr {
			xj := b.Let("xj", x.At(base.Add(j)))
			return xj.Mul(xj)
		})
		b.Store(ss, i, s)
		storeQuantized(b, 32, i, base, func(j any) k.Expr { return x.At(base.Add(j)).Mul(w.At(base.Sub(row).Add(j))) }, xq, xd)
	})
	b.Schedule("ps_i", k.LoopSchedule{Threads: WarpLanes})
	b.Schedule("j", k.LoopSchedule{Threads: WarpLanes})
	return b.MustBuild()
}

// DotSwiGLUQ8_0 is the SwiGLU mat-vec of weight type typ in shape sh
// (DotMatVec's "SwiGLU" form) with its output quantized to Q8_0 in the
// same launch: MatVecDotSwiGLU<typ><sh>Q8_0(wg, wu, xq, xd, y, yq, yd), a
// kernel.LocalPhases of the mat-vec, whose CTAs take 32 rows at a time
// (32/Rows groups of Threads, dotThenBlock's), and QuantizeQ8_0 (x = y,
// into yq, yd), a block a CTA: each CTA quantizes the rows it computed, so
// the quantizer needs no launch of its own. The bits are the two kernels'
// in turn (in the shape the CTA takes). yq
// and yd must not be xq and xd: other CTAs may still be reading those.
func DotSwiGLUQ8_0(typ string, sh DotShape) (*k.Kernel, error) {
	return DotFold("SwiGLU", typ, sh, false)
}

// DotAddNormQ8_0 is the mat-vec of weight type typ in shape sh that adds
// the residual (DotMatVec's "Add" form) with the RMSNorm after it begun in
// the same launch: MatVecDotAdd<typ><sh>NormQ8_0(w, xq, xd, res, y, x,
// nw, yq, yd, ss), a kernel.LocalPhases of the mat-vec, whose CTAs take 32
// rows at a time, and NormPartQ8_0 (x = y, nw the norm's weights), a
// block a CTA: the norm's readers take yq, yd and the parts ss with
// DotShape.Norm, so the norm needs no launch of its own. yq and yd must
// not be xq and xd.
func DotAddNormQ8_0(typ string, sh DotShape) (*k.Kernel, error) {
	return DotFold("Add", typ, sh, false)
}

// DotFold is the mat-vec of store form form ("SwiGLU" or "Add") with the
// block epilogue its output's reader wants in the same launch: for
// "SwiGLU" QuantizeQ8_0 (DotSwiGLUQ8_0), for "Add" NormPartQ8_0
// (DotAddNormQ8_0); in CTA-local phases, or counted
// (DotThenBlockCounted).
func DotFold(form, typ string, sh DotShape, counted bool) (*k.Kernel, error) {
	var suffix string
	var epilogue *k.Kernel
	switch form {
	case "SwiGLU":
		suffix, epilogue = "Q8_0", QuantizeQ8_0()
	case "Add":
		suffix, epilogue = "NormQ8_0", NormPartQ8_0()
	default:
		return nil, fmt.Errorf("MatVecDot%s%s: no block epilogue for form %s", form, typ, form)
	}
	if counted {
		return dotThenBlockCounted(form, typ, sh, epilogue)
	}
	return dotThenBlock(form, typ, sh, suffix, epilogue)
}

// DotThenBlockCounted is DotSwiGLUQ8_0 or DotAddNormQ8_0 (form "SwiGLU"
// or "Add") as a kernel.BlockEpilogue instead of local phases: the
// mat-vec in its own shape and grid (warp groups, staged where its shape
// is), each block of
// 32 outputs quantized (and, for "Add", its squares summed) by the group
// that completes it, counted in a U32 buffer after the epilogue's
// parameters. The bits are the two kernels' in turn.
func DotThenBlockCounted(form, typ string, sh DotShape) (*k.Kernel, error) {
	return DotFold(form, typ, sh, true)
}

// dotThenBlockCounted is DotThenBlockCounted with its epilogue.
func dotThenBlockCounted(form, typ string, sh DotShape, epilogue *k.Kernel) (*k.Kernel, error) {
	sh.Rows, sh.Threads = max(sh.Rows, 1), cmp.Or(sh.Threads, WarpLanes)
	if 32%sh.Rows != 0 || sh.Acts > 1 || sh.Threads != WarpLanes {
		return nil, fmt.Errorf("MatVecDot%s%s counted: shape %+v (warp groups, rows dividing 32, one activation row)", form, typ, sh)
	}
	mv := DotMatVec(form, typ, sh)
	return k.BlockEpilogue(mv.Name+"C"+epilogue.Name, 32, sh.Rows, mv, epilogue)
}

// localCTA is the most threads of a CTA of dotThenBlock: a CTA of 1024
// leaves a thread 64 registers, fewer than the mat-vecs take (the 8B's
// down projection on Q6_KA in CTAs of 1024 spilled 896 bytes a thread),
// and 512 keeps groups wider than a warp within the 15 named barriers a
// CTA has for them.
const localCTA = 512

// dotThenBlock is DotMatVec(form, typ, sh) and then epilogue, a kernel of
// one block of 32 outputs a group, as CTA-local phases: a CTA of 32 rows
// (32/Rows groups of Threads) whose epilogue takes the block it computed.
// Where those groups would make a CTA of more than localCTA threads the
// groups take more rows (up to 4; that changes no bit), then fewer
// threads, then more rows.
func dotThenBlock(form, typ string, sh DotShape, suffix string, epilogue *k.Kernel) (*k.Kernel, error) {
	sh.Rows, sh.Threads = max(sh.Rows, 1), cmp.Or(sh.Threads, WarpLanes)
	if 32%sh.Rows != 0 || sh.Acts > 1 {
		return nil, fmt.Errorf("MatVecDot%s%s%s: shape %+v (rows dividing 32, one activation row)", form, typ, suffix, sh)
	}
	for 32/sh.Rows*sh.Threads > localCTA {
		if sh.Rows < 4 || sh.Threads == WarpLanes {
			sh.Rows *= 2
		} else {
			sh.Threads /= 2
		}
	}
	mv := DotMatVec(form, typ, sh)
	return k.LocalPhases(mv.Name+suffix, 32/sh.Rows*sh.Threads, []int{0, 1}, mv, epilogue)
}

// groupSums folds a group's rows weight rows from row first on (of every
// matrix in ws, rowBytes each) against acts activation rows of nb blocks
// (xq, xd) in the grid loop's body, over a unit loop named loop: the
// accumulators by activation row, row of the group, then matrix.
func groupSums(b *k.Builder, loop string, c dotCut, ws []*k.Buf, xq, xd *k.Buf, nb, rowBytes, first k.Expr, rows, acts int) [][][]*k.Var {
	sums := make([][][]*k.Var, acts) // by activation row, row of the group, then matrix
	for a := range sums {
		sums[a] = make([][]*k.Var, rows)
		for q := range sums[a] {
			for m := range ws {
				name := fmt.Sprintf("sum%d_%d", q, m)
				if a > 0 {
					name = fmt.Sprintf("sum%d_%d_%d", a, q, m)
				}
				sums[a][q] = append(sums[a][q], b.Acc(name, k.OpAdd, k.F(0)))
			}
		}
	}
	b.For(loop, 0, nb.Mul(c.units), func(u k.Expr) {
		i := b.Let("i", u.Div(c.units))
		s := b.Let("s", u.Rem(c.units))
		for a := range sums {
			ia := i // the unit's block in activation row a
			if a > 0 {
				ia = b.Let("ia", nb.Mul(a).Add(i))
			}
			xb := b.View("xb", xq, ia.Mul(c.qk), c.qk)
			xs := xd.At(ia)
			if c.scales > 1 && c.scaled == nil {
				xs = xd.At(ia.Mul(c.scales).Add(s.Div(c.units / c.scales)))
			}
			for q := range sums[a] {
				r := first.Add(q)
				for m, w := range ws {
					wb := b.View("wb", w, r.Mul(rowBytes).Add(i.Mul(c.bytes)), c.bytes)
					if c.scaled != nil {
						b.Fold(sums[a][q][m], c.scaled(b, wb, xb, s, func(j k.Expr) k.Expr { return xd.At(ia.Mul(c.scales).Add(j)) }))
						continue
					}
					b.Fold(sums[a][q][m], xs.Mul(c.unit(b, wb, xb, s)))
				}
			}
		}
	})
	return sums
}

// ropeKVArgs are the RopeKV form's operands after y: the caches, the step,
// the RoPE's frequency divisors, q's and k's rows (v's are the rest), the
// head's width and its rotated values, the θ scale and frequency scale.
type ropeKVArgs struct {
	kc, vc, step, freqs      *k.Buf
	nq, nk, hd, dims, ts, fs k.Expr
	rows                     k.Expr // the stack's rows: len(y), or q's, k's and v's where y holds only q's and k's
}

func ropeKVParams(b *k.Builder) ropeKVArgs {
	kc, vc := b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	step, freqs := b.Buffer("step", k.I32), b.Buffer("freqs", k.F32)
	nq, nk := b.Scalar("nq", k.Int), b.Scalar("nk", k.Int)
	hd, dims := b.Scalar("headDim", k.Int), b.Scalar("dims", k.Int)
	ts, fs := b.Scalar("thetaScale", k.F32), b.Scalar("freqScale", k.F32)
	return ropeKVArgs{kc, vc, step, freqs, nq, nk, hd, dims, ts, fs, nil}
}

// pair stores rows r and r+1 (r even) of a q, k, v stack, their sums x0
// and x1, as RopeKVStore (RopeNormal) would after the plain mat-vec: q's
// rotated by the step's position and rounded to f16 into y, k's rotated
// and v's as they are, rounded to f16, into the caches' row step[1] (k's
// rows nk apart, v's len(y)−nq−nk). A pair past the head's dims is not
// rotated. The angle's bits are ropeWarp.head's: θ = pos·thetaScale^i by i
// multiplications, over freqs[i], times freqScale.
func (a ropeKVArgs) pair(b *k.Builder, y *k.Buf, r, x0, x1 k.Expr) {
	r = b.Let("r", r)
	x0, x1 = b.Let("x0", x0), b.Let("x1", x1)
	row := b.Let("row", a.step.At(1).Cvt(k.Int))
	nqk := b.Let("nqk", a.nq.Add(a.nk))
	isQ, isV := b.Let("isQ", r.Lt(a.nq)), b.Let("isV", r.Ge(nqk))
	j := b.Let("j", k.Select(isQ, r, r.Sub(a.nq)).Rem(a.hd)) // the pair's first value in its head
	rot := b.Let("rot", k.Select(isV, k.I(0), k.Select(j.Lt(a.dims), k.I(1), k.I(0))).Eq(1))
	i := b.Let("i", k.Select(rot, j.Div(2), k.I(0)))
	theta := b.Acc("theta", k.OpAdd, row.Cvt(k.F32))
	b.For("ti", 0, i, func(k.Expr) { b.Set(theta, theta.Get().Mul(a.ts)) })
	ang := b.Let("a", theta.Get().Div(a.freqs.At(i)).Mul(a.fs))
	c, s := b.Let("c", ang.Cos()), b.Let("s", ang.Sin())
	y0 := b.Let("y0", k.Select(rot, x0.Mul(c).Sub(x1.Mul(s)), x0))
	y1 := b.Let("y1", k.Select(rot, x0.Mul(s).Add(x1.Mul(c)), x1))
	once := func(cond k.Expr) k.Expr { return k.Select(cond, k.I(1), k.I(0)) }
	b.For("sq", 0, once(isQ), func(k.Expr) {
		b.Store(y, r, y0.F32ToF16().F16ToF32())
		b.Store(y, r.Add(1), y1.F32ToF16().F16ToF32())
	})
	b.For("sk", 0, k.Select(isQ, k.I(0), once(r.Lt(nqk))), func(k.Expr) {
		at := b.Let("at", row.Mul(a.nk).Add(r).Sub(a.nq))
		b.Store(a.kc, at, y0.F32ToF16())
		b.Store(a.kc, at.Add(1), y1.F32ToF16())
	})
	b.For("sv", 0, once(isV), func(k.Expr) {
		n := a.rows
		if n == nil {
			n = y.Len()
		}
		at := b.Let("at", row.Mul(n.Sub(nqk)).Add(r).Sub(nqk))
		b.Store(a.vc, at, x0.F32ToF16())
		b.Store(a.vc, at.Add(1), x1.F32ToF16())
	})
}
