package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// GPU-schedule mat-vecs: one warp per output row. A row's blocks are cut
// into units (a few bytes of quants each, read with one aligned 2- or
// 4-byte load); unit u of the row goes to lane u mod 32, so a warp's loads
// of one step are contiguous bytes, and the lanes' partial sums combine by
// the warp tree of dsl/kernel's cooperative loops. The arithmetic of each
// value is its BlockDecode's (the same f32 roundings of the scales), the
// order of the sum is the warp's: these are not the CPU's kernels and
// kernels/cpugen never renders them.

// WarpLanes is the cooperative width of the warp kernels.
const WarpLanes = 32

// warpSched splits loop u of a warp kernel over a warp.
func warpSched(b *k.Builder, loops ...string) {
	for _, l := range loops {
		b.Schedule(l, k.LoopSchedule{Threads: WarpLanes})
	}
}

// warpUnit decodes unit s (an Int in [0, units)) of block blk, emitting
// each of its values with its index in the block, in the order the sums
// fold them.
type warpUnit func(b *k.Builder, blk *k.Buf, s k.Expr, emit Emit)

// warpUnits are the warp kernels' block cuts: values a block, bytes, units.
type warpCut struct {
	qk, bytes, units int
	unit             warpUnit
}

func matVecWarp(name string, c warpCut) *k.Kernel { return matVecWarpForm(name, c, plainStore) }

// warpStore is what a warp mat-vec does with a row's sum as it stores it:
// the node after a block's projections done without a launch and a round
// trip of y of its own, in the bits of that node's kernel.
type warpStore int

const (
	plainStore    warpStore = iota
	residualStore           // y[r] = res[r] + sum: AddF32's bits (f32 addition commutes)
	siluStore               // y[r] = silu(sum): SiLUF32's bits
	mulStore                // y[r] = res[r] · sum: MulF32's bits (f32 multiplication commutes)
	swigluStore             // two matrices, gate and up: y[r] = silu(gate) · up, SiLUF32's then MulF32's bits
	ropeKVForm              // a q, k, v stack's rows rotated and cached in pairs (integer mat-vecs only: ropeKVArgs.pair)
)

// kernel is the name and doc line of store form st of a warp mat-vec of
// prefix ("MatVecWarp", "MatVecDot") for weight type typ, the activation
// read as operand: prefixNAME, prefixAddNAME, prefixSiLUNAME.
func (st warpStore) kernel(prefix, typ, operand string) (name, doc string) {
	dot := " matrix w dotted with " + operand + ", one warp per row."
	switch st {
	case residualStore:
		return prefix + "Add" + typ, "sets y[r] to res[r] plus row r of the " + typ + dot
	case siluStore:
		return prefix + "SiLU" + typ, "sets y[r] to the SiLU of row r of the " + typ + dot
	case mulStore:
		return prefix + "Mul" + typ, "sets y[r] to res[r] times row r of the " + typ + dot
	case ropeKVForm:
		return prefix + "RopeKV" + typ, "sets rows r of q in y, and of k and v in the caches at the step's position, to row r of the " + typ + dot[len(" matrix w"):] + " rotated as RoPE turns them"
	case swigluStore:
		return prefix + "SwiGLU" + typ, "sets y[r] to the SiLU of row r of the " + typ + " matrix wg times row r of wu, each dotted with " + operand + ", one warp per row."
	}
	return prefix + typ, "sets y[r] to row r of the " + typ + dot
}

// residual declares the other operand of the Add and Mul forms (nil
// otherwise); it comes before y.
func (st warpStore) residual(b *k.Builder) *k.Buf {
	if st == residualStore || st == mulStore {
		return b.Buffer("res", k.F32)
	}
	return nil
}

// store stores row r's sum as form st does.
func (st warpStore) store(b *k.Builder, y, res *k.Buf, r, sum k.Expr) {
	switch st {
	case residualStore:
		b.Store(y, r, res.At(r).Add(sum))
	case siluStore:
		b.Store(y, r, silu(b, sum))
	case mulStore:
		b.Store(y, r, res.At(r).Mul(sum))
	default:
		b.Store(y, r, sum)
	}
}

func matVecWarpForm(name string, c warpCut, st warpStore) *k.Kernel {
	qk, bytes, units, unit := c.qk, c.bytes, c.units, c.unit
	kname, doc := st.kernel("MatVecWarp", name, "x")
	b := k.New(kname)
	b.Doc(doc)
	w, x := b.Buffer("w", k.U8), b.Buffer("x", k.F32)
	res := st.residual(b)
	y := b.Buffer("y", k.F32)
	nb := b.Let("nb", x.Len().Div(qk))
	rowBytes := b.Let("rowBytes", nb.Mul(bytes))
	b.ParallelFor("r", 0, y.Len(), func(r k.Expr) {
		sum := b.Acc("sum", k.OpAdd, k.F(0))
		b.For("u", 0, nb.Mul(units), func(u k.Expr) {
			i := b.Let("i", u.Div(units))
			s := b.Let("s", u.Rem(units))
			wb := b.View("wb", w, r.Mul(rowBytes).Add(i.Mul(bytes)), bytes)
			xb := b.View("xb", x, i.Mul(qk), qk)
			unit(b, wb, s, func(j, v k.Expr) { b.Fold(sum, v.Mul(xb.At(j))) })
		})
		st.store(b, y, res, r, sum.Get())
	})
	warpSched(b, "u")
	return b.MustBuild()
}

// byteOf is byte c of an aligned little-endian load v.
func byteOf(v k.Expr, c int) k.Expr { return v.Shr(8 * c).And(0xff).Cvt(k.U8) }

// MatVecWarpQ4_K: unit s (8 per block) is bytes 4s..4s+3 of each of the
// four 32-byte quant groups: 32 values, four aligned u32 loads (144-byte
// blocks keep them aligned).
func MatVecWarpQ4_K() *k.Kernel { return matVecWarp("Q4_K", cutQ4_K) }

var cutQ4_K = warpCut{256, 144, 8, func(b *k.Builder, blk *k.Buf, s k.Expr, emit Emit) {
	d, dmin := b.Let("d", blk.F16(0)), b.Let("dmin", blk.F16(2))
	l4 := b.Let("l4", s.Mul(4))
	for j := 0; j < 4; j++ {
		s1, m1 := scaleMinK4(blk, 4, 2*j)
		s2, m2 := scaleMinK4(blk, 4, 2*j+1)
		d1, mm1 := b.Let("d1", d.Mul(s1.Cvt(k.F32))), b.Let("m1", dmin.Mul(m1.Cvt(k.F32)))
		d2, mm2 := b.Let("d2", d.Mul(s2.Cvt(k.F32))), b.Let("m2", dmin.Mul(m2.Cvt(k.F32)))
		q4 := b.Let("q4", blk.Aligned(k.U32, l4.Add(16+32*j)))
		for c := 0; c < 4; c++ {
			q := byteOf(q4, c)
			emit(l4.Add(64*j+c), d1.Mul(q.And(0xf).Cvt(k.F32)).Sub(mm1))
			emit(l4.Add(64*j+32+c), d2.Mul(q.Shr(4).Cvt(k.F32)).Sub(mm2))
		}
	}
}}

// MatVecWarpQ6_K: unit s (16 per block) is l = 2s, 2s+1 of both halves:
// 16 values from aligned u16 loads of ql, ql+32 and qh (210-byte blocks are
// even).
func MatVecWarpQ6_K() *k.Kernel { return matVecWarp("Q6_K", cutQ6_K) }

var cutQ6_K = warpCut{256, 210, 16, func(b *k.Builder, blk *k.Buf, s k.Expr, emit Emit) {
	d := b.Let("d", blk.F16(208))
	l := b.Let("l", s.Mul(2))
	is := b.Let("is", s.Div(8)) // l/16
	for n := 0; n < 2; n++ {
		ql0 := b.Let("ql0", blk.Aligned(k.U16, l.Add(64*n)))
		ql32 := b.Let("ql32", blk.Aligned(k.U16, l.Add(64*n+32)))
		h := b.Let("h", blk.Aligned(k.U16, l.Add(128+32*n)))
		var sc [4]k.Expr
		for t := range sc {
			sc[t] = b.Let("sc", d.Mul(blk.I8(is.Add(192+8*n+2*t)).Cvt(k.F32)))
		}
		for c := 0; c < 2; c++ {
			for t, q := range q6kQuants(byteOf(ql0, c), byteOf(ql32, c), byteOf(h, c)) {
				v := sc[t].Mul(q.Cvt(k.I32).Sub(32).Cvt(k.F32))
				emit(l.Add(128*n+32*t+c), v)
			}
		}
	}
}}

// MatVecWarpQ8_0: unit s (8 per block) is values 4s..4s+3, two aligned u16
// loads.
func MatVecWarpQ8_0() *k.Kernel { return matVecWarp("Q8_0", cutQ8_0) }

var cutQ8_0 = warpCut{32, 34, 8, func(b *k.Builder, blk *k.Buf, s k.Expr, emit Emit) {
	d := b.Let("d", blk.F16(0))
	j := b.Let("j", s.Mul(4))
	for h := 0; h < 2; h++ {
		p := b.Let("p", blk.Aligned(k.U16, j.Add(2+2*h)))
		for c := 0; c < 2; c++ {
			q := byteOf(p, c).Cvt(k.I8)
			emit(j.Add(2*h+c), q.Cvt(k.F32).Mul(d))
		}
	}
}}

// MatVecWarpQ4_0: unit s (8 per block) is bytes 2s, 2s+1 of the quants:
// values 2s, 2s+1 (low nibbles) and 2s+16, 2s+17 (high), one aligned u16.
func MatVecWarpQ4_0() *k.Kernel { return matVecWarp("Q4_0", cutQ4_0) }

var cutQ4_0 = warpCut{32, 18, 8, func(b *k.Builder, blk *k.Buf, s k.Expr, emit Emit) {
	d := b.Let("d", blk.F16(0))
	j := b.Let("j", s.Mul(2))
	p := b.Let("p", blk.Aligned(k.U16, j.Add(2)))
	for c := 0; c < 2; c++ {
		q := byteOf(p, c)
		emit(j.Add(c), q.And(0xf).Cvt(k.I32).Sub(8).Cvt(k.F32).Mul(d))
		emit(j.Add(16+c), q.Shr(4).Cvt(k.I32).Sub(8).Cvt(k.F32).Mul(d))
	}
}}

// WarpMatVecs are the warp mat-vecs by weight type name.
func WarpMatVecs() map[string]func() *k.Kernel {
	return map[string]func() *k.Kernel{
		"Q4_K": MatVecWarpQ4_K, "Q6_K": MatVecWarpQ6_K, "Q8_0": MatVecWarpQ8_0, "Q4_0": MatVecWarpQ4_0,
		"F32": MatVecWarpF32, "F16": MatVecWarpF16, "BF16": MatVecWarpBF16,
	}
}

// quantWarpCuts are the block cuts of the quantized warp kernels by type
// name (a function: the cuts are package variables set at init).
func quantWarpCuts() map[string]warpCut {
	return map[string]warpCut{"Q4_K": cutQ4_K, "Q6_K": cutQ6_K, "Q8_0": cutQ8_0, "Q4_0": cutQ4_0}
}

// WarpMatVecsAdd are the quantized warp mat-vecs with the residual added
// (MatVecWarpAdd<type>(w, x, res, y)), by weight type name.
func WarpMatVecsAdd() map[string]func() *k.Kernel { return warpForms(residualStore) }

// WarpMatVecsSiLU are the quantized warp mat-vecs storing the SiLU of each
// sum (MatVecWarpSiLU<type>(w, x, y)), by weight type name.
func WarpMatVecsSiLU() map[string]func() *k.Kernel { return warpForms(siluStore) }

func warpForms(st warpStore) map[string]func() *k.Kernel {
	out := map[string]func() *k.Kernel{}
	for name, c := range quantWarpCuts() {
		out[name] = func() *k.Kernel { return matVecWarpForm(name, c, st) }
	}
	return out
}

// MatVecWarpF32 is MatVecF32 with value i of a row on lane i mod 32:
// products in f32 summed in f64 per lane, the warp tree in f64, rounded to
// f32 once.
func MatVecWarpF32() *k.Kernel {
	return floatMatVecWarp("F32", 4, func(w *k.Buf, o k.Expr) k.Expr { return w.Aligned(k.U32, o).F32FromBits() }, keepF32)
}

// MatVecWarpF16 is MatVecF16 (x rounded to f16 first) split as
// MatVecWarpF32.
func MatVecWarpF16() *k.Kernel {
	return floatMatVecWarp("F16", 2, func(w *k.Buf, o k.Expr) k.Expr { return w.Aligned(k.U16, o).F16ToF32() }, roundF16)
}

func floatMatVecWarp(name string, size int, load func(w *k.Buf, off k.Expr) k.Expr, round func(b *k.Builder, x k.Expr) k.Expr) *k.Kernel {
	b := k.New("MatVecWarp" + name)
	b.Doc("sets y[r] to row r of the " + name + " matrix w dotted with x, one warp per row.")
	w, x, y := b.Buffer("w", k.U8), b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	n := b.Let("n", x.Len())
	b.ParallelFor("r", 0, y.Len(), func(r k.Expr) {
		base := b.Let("base", r.Mul(n))
		sum := b.Acc("sum", k.OpAdd, k.D(0))
		b.For("i", 0, n, func(i k.Expr) {
			b.Fold(sum, load(w, base.Add(i).Mul(size)).Mul(round(b, x.At(i))).Cvt(k.F64))
		})
		b.Store(y, r, sum.Get().Cvt(k.F32))
	})
	warpSched(b, "i")
	return b.MustBuild()
}

// Cooperative forms of existing kernels: the same body, loops split over
// threads. Max and min folds and independent stores give the serial
// kernel's bits; float sums take the tree's order.

// WithThreads is a copy of kern whose loops named in loops run split over
// w cooperating threads (the body is shared; kern is not changed).
func WithThreads(kern *k.Kernel, w int, loops ...string) *k.Kernel {
	c := *kern
	s := k.Schedule{}
	for _, l := range loops {
		s[l] = k.LoopSchedule{Threads: w}
	}
	c.Schedule = kern.Schedule.With(s)
	return &c
}

// NormThreads is the CTA width of the cooperative RMSNorm.
const NormThreads = 256

// RMSNormCTA is RMSNorm with its sum and its scaling loop over one CTA of
// NormThreads threads (the f64 sum in the tree's order).
func RMSNormCTA(weighted bool) *k.Kernel {
	return WithThreads(RMSNorm(weighted), NormThreads, "ss_i", "i")
}

// QuantRoundWarp is a QuantRound kernel (QuantRoundQ8_0 or QuantRoundQ8_K)
// with each block's loops over a warp: the same bits (its folds are max
// and min).
func QuantRoundWarp(kern *k.Kernel) *k.Kernel { return WithThreads(kern, WarpLanes, "j") }

// AttentionWarp is Attention with one warp per (row, head): the q·k dot
// over the lanes (the f64 sum in the tree's order) and each lane owning the
// head dimensions d ≡ lane mod 32 of the accumulator.
func AttentionWarp() *k.Kernel { return WithThreads(Attention(), WarpLanes, "i", "d") }
