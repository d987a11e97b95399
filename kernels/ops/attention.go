package ops

import (
	"fmt"
	"math"

	"github.com/jitllm/jitllm/dsl"
	k "github.com/jitllm/jitllm/dsl/kernel"
)

// The kernels a backend that keeps the step's token ids and position on the
// device needs (runtime/gpuexec): step is an I32 buffer, step[0] the token
// of the step's row and step[1] its position, so one captured sequence of
// launches serves every position.

// Embed is EmbedNAME(w []byte, tok []int32, y []float32, cols int): row
// tok[r] of the NAME matrix w (rows of cols values) decoded into row r of
// y, one grid-loop iteration per block.
func Embed(d BlockDecode) *k.Kernel {
	b := k.New("Embed" + d.Name)
	b.Doc("decodes row tok[r] of the " + d.Name + " matrix w into row r of y.")
	w, tok, y := b.Buffer("w", k.U8), b.Buffer("tok", k.I32), b.Buffer("y", k.F32)
	cols := b.Scalar("cols", k.Int)
	nb := b.Let("nb", cols.Div(d.QK))
	rowBytes := b.Let("rowBytes", nb.Mul(d.Bytes))
	if c, ok := quantWarpCuts()[d.Name]; ok {
		// a thread per unit of a block, as DequantF16 decodes: a decode
		// step's one row is then 8×units threads, not 8 (a Q6_K row of the
		// 1B took 60 µs a block a thread)
		b.ParallelFor("u", 0, y.Len().Div(d.QK).Mul(c.units), func(u k.Expr) {
			t := b.Let("t", u.Div(c.units))
			row := b.Let("row", tok.At(t.Div(nb)).Cvt(k.Int))
			in := b.View("in", w, row.Mul(rowBytes).Add(t.Rem(nb).Mul(d.Bytes)), d.Bytes)
			c.unit(b, in, u.Rem(c.units), func(j, v k.Expr) { b.Store(y, t.Mul(d.QK).Add(j), v) })
		})
		return b.MustBuild()
	}
	b.ParallelFor("t", 0, y.Len().Div(d.QK), func(t k.Expr) {
		row := b.Let("row", tok.At(t.Div(nb)).Cvt(k.Int))
		in := b.View("in", w, row.Mul(rowBytes).Add(t.Rem(nb).Mul(d.Bytes)), d.Bytes)
		out := b.View("out", y, t.Mul(d.QK), d.QK)
		d.Decode(b, in, func(j, v k.Expr) { b.Store(out, j, v) })
	})
	sched(b, d.Sched)
	return b.MustBuild()
}

// EmbedFloat is EmbedF32 or EmbedF16 (f16 is false or true), Embed for a
// float matrix: one grid-loop iteration per value.
func EmbedFloat(f16 bool) *k.Kernel {
	name, size := "F32", 4
	if f16 {
		name, size = "F16", 2
	}
	b := k.New("Embed" + name)
	b.Doc("copies row tok[r] of the " + name + " matrix w into row r of y.")
	w, tok, y := b.Buffer("w", k.U8), b.Buffer("tok", k.I32), b.Buffer("y", k.F32)
	cols := b.Scalar("cols", k.Int)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		row := b.Let("row", tok.At(i.Div(cols)).Cvt(k.Int))
		off := b.Let("off", row.Mul(cols).Add(i.Rem(cols)).Mul(size))
		if f16 {
			b.Store(y, i, w.F16(off))
		} else {
			b.Store(y, i, w.F32(off))
		}
	})
	return b.MustBuild()
}

// The position-dependent kernels come in two forms built by one function
// each, differing only in where a row's position and cache slot come from:
//
//   - step (runtime/gpuexec): step[1] is row 0's position, rows follow it,
//     one sequence whose cache starts at row 0;
//   - seq (runtime/exec, the CPU backend): rowPos[r] is row r's position in
//     its sequence rowSeq[r], whose cache slot starts at rowSeq[r]·ctx rows.

// RopePos is RopeNormalPosD or RopeNeoxPosD (D = dims, fixed when the
// kernel is built): RopePos(x, y []float32, step []int32, freqs []float32,
// headDim, heads int, thetaScale, freqScale float32). Row r of x (heads
// heads of headDim values) is at position step[1]+r; pair i of each head
// turns by θ_i/freqs[i]·freqScale, where θ_0 is the position and θ_{i+1} =
// θ_i·thetaScale in f32, as runtime/exec (and ggml) iterate it; cos and sin
// are the f32 roundings of the f64 functions. The values past dims are
// copied. freqs holds dims/2 divisors (ones when the model has none).
func RopePos(mode, dims int) *k.Kernel { return rope(mode, dims, false) }

// RopeSeq is RopeNormalSeq or RopeNeoxSeq(x, y []float32, rowPos []int32,
// freqs []float32, headDim, heads, dims int, thetaScale, freqScale
// float32): RopePos with row r at position rowPos[r] and dims a parameter.
func RopeSeq(mode int) *k.Kernel { return rope(mode, 0, true) }

// rope builds RopePos (dims > 0, step positions) or RopeSeq (dims 0: a
// scalar; seq positions).
func rope(mode, dims int, seq bool) *k.Kernel {
	name := ropeName(mode)
	if seq {
		name += "Seq"
	} else {
		name = fmt.Sprintf("%sPos%d", name, dims)
	}
	b := k.New(name)
	x, y := b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	var pos func(row k.Expr) k.Expr
	if seq {
		b.Doc("rotates the first dims values of each head of x into y by its row's position rowPos[r].")
		rp := b.Buffer("rowPos", k.I32)
		pos = func(row k.Expr) k.Expr { return rp.At(row).Cvt(k.Int) }
	} else {
		b.Doc("rotates the first dims values of each head of x into y by the step's position.")
		step := b.Buffer("step", k.I32)
		pos = func(row k.Expr) k.Expr { return step.At(1).Cvt(k.Int).Add(row) }
	}
	freqs := b.Buffer("freqs", k.F32)
	hd, heads := b.Scalar("headDim", k.Int), b.Scalar("heads", k.Int)
	nd, half := k.I(dims), k.I(dims/2)
	if seq {
		nd = b.Scalar("dims", k.Int)
	}
	ts, fs := b.Scalar("thetaScale", k.F32), b.Scalar("freqScale", k.F32)
	if seq {
		half = b.Let("half", nd.Div(2))
	}
	b.ParallelFor("t", 0, x.Len().Div(hd), func(t k.Expr) {
		o := b.Let("o", t.Mul(hd))
		theta := b.Acc("theta", k.OpAdd, pos(t.Div(heads)).Cvt(k.F32))
		b.For("p", 0, half, func(i k.Expr) {
			th := b.Let("th", theta.Get())
			a := b.Let("a", th.Div(freqs.At(i)).Mul(fs))
			c, s := b.Let("c", a.Cos()), b.Let("s", a.Sin())
			var a0, a1 k.Expr
			if mode == dsl.RopeNeox {
				a0 = b.Let("a0", o.Add(i))
				a1 = b.Let("a1", a0.Add(half))
			} else {
				a0 = b.Let("a0", o.Add(i.Mul(2)))
				a1 = b.Let("a1", a0.Add(1))
			}
			x0, x1 := b.Let("x0", x.At(a0)), b.Let("x1", x.At(a1))
			b.Store(y, a0, x0.Mul(c).Sub(x1.Mul(s)))
			b.Store(y, a1, x0.Mul(s).Add(x1.Mul(c)))
			b.Set(theta, th.Mul(ts))
		})
		b.For("i", nd, hd, func(i k.Expr) { b.Store(y, o.Add(i), x.At(o.Add(i))) })
	})
	if !seq {
		b.Schedule("p", k.LoopSchedule{Unroll: dims / 2}) // constant offsets, as the trip count is
	}
	return b.MustBuild()
}

// KVStore is KVStore(k, v []float32, kc, vc []uint16, step []int32, kvDim
// int): the step's rows of k and v (kvDim values each) rounded to f16
// (ties to even) into the caches at rows step[1], step[1]+1, ….
func KVStore() *k.Kernel { return kvStore(false) }

// KVStoreSeq is KVStoreSeq(k, v []float32, kc, vc []uint16, rowPos,
// rowSeq []int32, kvDim, ctx int): KVStore with row r stored at cache row
// rowSeq[r]·ctx + rowPos[r].
func KVStoreSeq() *k.Kernel { return kvStore(true) }

func kvStore(seq bool) *k.Kernel {
	name := "KVStore"
	if seq {
		name += "Seq"
	}
	b := k.New(name)
	kx, vx := b.Buffer("k", k.F32), b.Buffer("v", k.F32)
	kc, vc := b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	var at func(i k.Expr) k.Expr
	if seq {
		b.Doc("stores the rows of k and v, rounded to f16, into the caches at each row's sequence and position.")
		rp, rs := b.Buffer("rowPos", k.I32), b.Buffer("rowSeq", k.I32)
		dim, ctx := b.Scalar("kvDim", k.Int), b.Scalar("ctx", k.Int)
		at = func(i k.Expr) k.Expr {
			row := b.Let("row", i.Div(dim))
			slot := b.Let("slot", rs.At(row).Cvt(k.Int).Mul(ctx).Add(rp.At(row).Cvt(k.Int)))
			return slot.Mul(dim).Add(i.Rem(dim))
		}
	} else {
		b.Doc("appends the step's k and v rows, rounded to f16, to the caches at the step's position.")
		step := b.Buffer("step", k.I32)
		dim := b.Scalar("kvDim", k.Int)
		at = func(i k.Expr) k.Expr { return step.At(1).Cvt(k.Int).Mul(dim).Add(i) }
	}
	b.ParallelFor("i", 0, kx.Len(), func(i k.Expr) {
		at := b.Let("at", at(i))
		b.Store(kc, at, kx.At(i).F32ToF16())
		b.Store(vc, at, vx.At(i).F32ToF16())
	})
	return b.MustBuild()
}

// Attention is Attention(q []float32, kc, vc []uint16, y []float32, step
// []int32, headDim, heads, group, kvDim int, scale float32): causal
// attention of each (row, head) of q over the f16 caches, one grid-loop
// iteration per pair, with runtime/exec's arithmetic (ggml's CPU flash
// attention over an f16 cache): the query rounded to f16; per cached
// position j ≤ step[1]+row the score s = (q·k_j)·scale (exact f16 products
// summed in f64, rounded to f32); an online softmax: when s exceeds the
// running maximum M the accumulator is rescaled by ms = exp(M−s) and
// rounded to f16, else vs = exp(s−M); acc = f16(fma(v_j, vs, acc)); S =
// S·ms + vs; finally y = acc/S (multiplied by the f32 inverse). Query head h
// reads KV head h/group.
func Attention() *k.Kernel { return attention(false) }

// AttentionSeq is AttentionSeq(q []float32, kc, vc []uint16, y []float32,
// rowPos, rowSeq []int32, headDim, heads, group, kvDim, ctx, t0 int, scale
// float32): Attention over (row, head) pairs t0, t0+1, … (q and y hold
// theirs, from pair t0 on: a caller splits the pairs by slicing), row r at
// position rowPos[r] of the cache slot of sequence rowSeq[r] (ctx rows
// each), and q·k_j in the order of ggml_vec_dot_f16's AVX512 build
// (quant.DotF16AVX512Values), as the CPU backend runs it.
func AttentionSeq() *k.Kernel { return attention(true) }

// dotF16AVX512 is DotF16AVX512's order (simdF(64, false)) for accumulator
// acc over lane loop loop.
func dotF16AVX512(acc, loop string) k.Schedule {
	o := simdF(64, false)["sum"].Order
	o.LaneLoop = loop
	return k.Schedule{acc: {Order: o}}
}

func attention(seq bool) *k.Kernel {
	name := "Attention"
	if seq {
		name += "Seq"
	}
	b := k.New(name)
	q, kc, vc, y := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16), b.Buffer("y", k.F32)
	var rp, rs, step *k.Buf
	if seq {
		b.Doc("attends each (row, head) pair of q from pair t0 on over its sequence's f16 KV caches up to the row's position.")
		rp, rs = b.Buffer("rowPos", k.I32), b.Buffer("rowSeq", k.I32)
	} else {
		b.Doc("attends each head of each row of q over the f16 KV caches up to the row's position.")
		step = b.Buffer("step", k.I32)
	}
	hd, heads := b.Scalar("headDim", k.Int), b.Scalar("heads", k.Int)
	group, dim := b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	var ctx, t0 k.Expr
	if seq {
		ctx, t0 = b.Scalar("ctx", k.Int), b.Scalar("t0", k.Int)
	}
	scale := b.Scalar("scale", k.F32)
	f16 := func(v k.Expr) k.Expr { return v.F32ToF16().F16ToF32() }
	b.ParallelFor("t", 0, q.Len().Div(hd), func(t k.Expr) {
		qo := b.Let("qo", t.Mul(hd))
		var pos, off k.Expr
		if seq {
			pr := b.Let("pr", t0.Add(t))
			row := b.Let("row", pr.Div(heads))
			pos = b.Let("pos", rp.At(row).Cvt(k.Int))
			off = b.Let("off", rs.At(row).Cvt(k.Int).Mul(ctx).Mul(dim).Add(pr.Rem(heads).Div(group).Mul(hd)))
		} else {
			pos = b.Let("pos", step.At(1).Cvt(k.Int).Add(t.Div(heads)))
			off = b.Let("off", t.Rem(heads).Div(group).Mul(hd))
		}
		b.For("d", 0, hd, func(d k.Expr) { b.Store(y, qo.Add(d), k.F(0)) })
		M := b.Acc("M", k.OpMax, k.F(math.Inf(-1)))
		S := b.Acc("S", k.OpAdd, k.F(0))
		b.For("j", 0, pos.Add(1), func(j k.Expr) {
			kb := b.Let("kb", j.Mul(dim).Add(off))
			dot := b.Acc("dot", k.OpAdd, k.D(0))
			b.For("i", 0, hd, func(d k.Expr) {
				b.Fold(dot, f16(q.At(qo.Add(d))).Mul(kc.At(kb.Add(d)).F16ToF32()).Cvt(k.F64))
			})
			s := b.Let("s", dot.Get().Cvt(k.F32).Mul(scale))
			m := b.Let("m", M.Get())
			gt := b.Let("gt", s.Gt(m))
			first := b.Let("first", j.Eq(0))
			// exp(M - s) at j = 0 would be exp(-inf): ggml's 0, selected here
			ms := b.Let("ms", k.Select(first, k.F(0), k.Select(gt, m.Sub(s).Exp(), k.F(1))))
			vs := b.Let("vs", k.Select(gt, k.F(1), s.Sub(m).Exp()))
			b.Set(M, k.Select(gt, s, m))
			b.For("d", 0, hd, func(d k.Expr) {
				acc := b.Let("acc", y.At(qo.Add(d)))
				acc = b.Let("acc", k.Select(gt, f16(acc.Mul(ms)), acc))
				b.Store(y, qo.Add(d), f16(vc.At(kb.Add(d)).F16ToF32().FMA(vs, acc)))
			})
			b.Set(S, S.Get().Mul(ms).Add(vs))
		})
		inv := b.Let("inv", k.F(1).Div(S.Get()))
		b.For("d", 0, hd, func(d k.Expr) { b.Store(y, qo.Add(d), y.At(qo.Add(d)).Mul(inv)) })
	})
	if seq {
		for name, s := range dotF16AVX512("dot", "i") {
			b.Schedule(name, s)
		}
	}
	return b.MustBuild()
}
