package ops

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl"
	k "github.com/jitllm/jitllm/dsl/kernel"
)

// GPU-schedule kernels over many activation rows, for a prefill step of R
// rows (runtime/gpuexec).

// MatMulGroup is the activation rows a warp of MatMulWarpNAME or a thread of
// MatMulRowsNAME multiplies at once: each
// weight value is decoded once for all of them.
const MatMulGroup = 8

// MatMulOuts is the weight rows a warp of MatMulWarpNAME takes at once
// (on the H200 two beat one by 1.7× and four by 6%, TestGPUMatMulForms):
// each activation value it loads serves MatMulOuts products, so the reads
// of x (the prefill product's bulk of memory traffic, one weight row per
// warp) fall by that factor.
const MatMulOuts = 2

// MatMulWarp is MatMulWarpNAME(w []byte, x, y []float32, cols int): for
// each of the len(x)/cols rows r of x, y[r·n+o] = row o of W dotted with
// row r of x, n = len(y)/rows; a warp takes MatMulOuts weight rows and
// MatMulGroup activation rows, lane u mod 32 unit u of each row (as
// MatVecWarpNAME), so each row's sum is the mat-vec's bit for bit. The
// types are WarpMatVecs' quantized ones.
func MatMulWarp(name string) (*k.Kernel, bool) { return MatMulWarpTile(name, MatMulOuts) }

// MatMulWarpTile is MatMulWarp with outs weight rows a warp (the kernel is
// MatMulWarpNAME at MatMulOuts, MatMulWarpNAMExOUTS otherwise).
func MatMulWarpTile(name string, outs int) (*k.Kernel, bool) {
	c, ok := quantWarpCuts()[name]
	if !ok || outs < 1 {
		return nil, false
	}
	kname := "MatMulWarp" + name
	if outs != MatMulOuts {
		kname = fmt.Sprintf("%sx%d", kname, outs)
	}
	b := k.New(kname)
	b.Doc(fmt.Sprintf("sets y[r*n+o] to row o of the %s matrix w dotted with row r of x, a warp per (%d o, %d rows).", name, outs, MatMulGroup))
	w, x, y := b.Buffer("w", k.U8), b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	cols := b.Scalar("cols", k.Int)
	nb := b.Let("nb", cols.Div(c.qk))
	rowBytes := b.Let("rowBytes", nb.Mul(c.bytes))
	rows := b.Let("rows", x.Len().Div(cols))
	n := b.Let("n", y.Len().Div(rows))
	groups := b.Let("groups", rows.Add(MatMulGroup-1).Div(MatMulGroup))
	tiles := b.Let("tiles", n.Add(outs-1).Div(outs))
	b.ParallelFor("t", 0, groups.Mul(tiles), func(t k.Expr) {
		o0 := b.Let("o0", t.Rem(tiles).Mul(outs))
		r0 := b.Let("r0", t.Div(tiles).Mul(MatMulGroup))
		sums := make([][MatMulGroup]*k.Var, outs)
		for q := range sums {
			for r := range sums[q] {
				sums[q][r] = b.Acc("sum", k.OpAdd, k.F(0))
			}
		}
		b.For("u", 0, nb.Mul(c.units), func(u k.Expr) {
			i := b.Let("i", u.Div(c.units))
			s := b.Let("s", u.Rem(c.units))
			var xbs [MatMulGroup]*k.Buf
			for r := range xbs {
				// rows past the last are the last again: computed, never stored
				row := r0.Add(r).Min(rows.Sub(1))
				xbs[r] = b.View("xb", x, row.Mul(cols).Add(i.Mul(c.qk)), c.qk)
			}
			// every weight row's unit decoded (its loads and scales), then
			// value by value: x loaded once for all outs rows
			var js []k.Expr
			vals := make([][]k.Expr, outs)
			for q := range vals {
				o := o0.Add(q).Min(n.Sub(1)) // as rows: past the last, the last again
				wb := b.View("wb", w, o.Mul(rowBytes).Add(i.Mul(c.bytes)), c.bytes)
				c.unit(b, wb, s, func(j, v k.Expr) {
					if q == 0 {
						js = append(js, j)
					}
					vals[q] = append(vals[q], v)
				})
			}
			for e, j := range js {
				var xs [MatMulGroup]k.Expr
				for r := range xs {
					xs[r] = b.Let("xv", xbs[r].At(j))
				}
				for q := range vals {
					v := b.Let("v", vals[q][e])
					for r := range xs {
						b.Fold(sums[q][r], v.Mul(xs[r]))
					}
				}
			}
		})
		b.For("oo", o0, o0.Add(outs).Min(n), func(o k.Expr) {
			b.For("rr", r0, r0.Add(MatMulGroup).Min(rows), func(rr k.Expr) {
				var v k.Expr
				for q := outs - 1; q >= 0; q-- {
					vq := sums[q][MatMulGroup-1].Get()
					for r := MatMulGroup - 2; r >= 0; r-- {
						vq = k.Select(rr.Eq(r0.Add(r)), sums[q][r].Get(), vq)
					}
					if v == nil {
						v = vq
					} else {
						v = k.Select(o.Eq(o0.Add(q)), vq, v)
					}
				}
				b.Store(y, rr.Mul(n).Add(o), v)
			})
		})
	})
	warpSched(b, "u")
	return b.MustBuild(), true
}

// MatMulRows is MatMulRowsNAME(w []byte, x, y []float32, cols int), the
// product MatMulWarp computes, for any BlockDecode, laid out the other way:
// a thread per (weight row o, MatMulGroup activation rows), walking the
// row's blocks in the decode's order (MatVec's order, each activation row
// its own sum). Threads of a warp take consecutive weight rows, so their
// reads of x are one address (a broadcast) while each reads its own
// weight row; MatMulWarp instead spreads one weight row over the lanes and
// reads x at 32 addresses a load.
func MatMulRows(d BlockDecode) *k.Kernel {
	b := k.New("MatMulRows" + d.Name)
	b.Doc("sets y[r*n+o] to row o of the " + d.Name + " matrix w dotted with row r of x, a thread per (o, 8 rows).")
	w, x, y := b.Buffer("w", k.U8), b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	cols := b.Scalar("cols", k.Int)
	nb := b.Let("nb", cols.Div(d.QK))
	rowBytes := b.Let("rowBytes", nb.Mul(d.Bytes))
	rows := b.Let("rows", x.Len().Div(cols))
	n := b.Let("n", y.Len().Div(rows))
	groups := b.Let("groups", rows.Add(MatMulGroup-1).Div(MatMulGroup))
	b.ParallelFor("t", 0, groups.Mul(n), func(t k.Expr) {
		o := b.Let("o", t.Rem(n))
		r0 := b.Let("r0", t.Div(n).Mul(MatMulGroup))
		var sums [MatMulGroup]*k.Var
		for c := range sums {
			sums[c] = b.Acc("sum", k.OpAdd, k.F(0))
		}
		b.For("blk", 0, nb, func(i k.Expr) {
			wb := b.View("wb", w, o.Mul(rowBytes).Add(i.Mul(d.Bytes)), d.Bytes)
			var xbs [MatMulGroup]*k.Buf
			for r := range xbs {
				row := r0.Add(r).Min(rows.Sub(1))
				xbs[r] = b.View("xb", x, row.Mul(cols).Add(i.Mul(d.QK)), d.QK)
			}
			d.Decode(b, wb, func(j, v k.Expr) {
				for r := range sums {
					b.Fold(sums[r], v.Mul(xbs[r].At(j)))
				}
			})
		})
		storeRows(b, y, r0, rows, n, o, sums)
	})
	sched(b, d.Sched)
	return b.MustBuild()
}

// storeRows stores sums[r] at y[(r0+r)·n+o] for the rows below rows.
func storeRows(b *k.Builder, y *k.Buf, r0, rows, n, o k.Expr, sums [MatMulGroup]*k.Var) {
	b.For("rr", r0, r0.Add(MatMulGroup).Min(rows), func(rr k.Expr) {
		v := sums[MatMulGroup-1].Get()
		for r := MatMulGroup - 2; r >= 0; r-- {
			v = k.Select(rr.Eq(r0.Add(r)), sums[r].Get(), v)
		}
		b.Store(y, rr.Mul(n).Add(o), v)
	})
}

// RMSNormRows is RMSNormRows(x, w, y []float32, eps float32, cols int) (w
// absent unless weighted): RMSNormCTA on each row of cols values, one CTA
// of NormThreads per row, with its bits.
func RMSNormRows(weighted bool) *k.Kernel {
	name := "RMSNormRows"
	if !weighted {
		name = "RMSNormRowsNoWeight"
	}
	b := k.New(name)
	b.Doc("sets each row of y to the row of x over sqrt(mean(x²) + eps), times w where present, a CTA per row.")
	x := b.Buffer("x", k.F32)
	var w *k.Buf
	if weighted {
		w = b.Buffer("w", k.F32)
	}
	y := b.Buffer("y", k.F32)
	eps := b.Scalar("eps", k.F32)
	cols := b.Scalar("cols", k.Int)
	b.ParallelFor("r", 0, x.Len().Div(cols), func(r k.Expr) {
		base := b.Let("base", r.Mul(cols))
		ss := b.Sum("ss", k.F64, 0, cols, func(i k.Expr) k.Expr {
			xi := b.Let("xi", x.At(base.Add(i)))
			return xi.Mul(xi).Cvt(k.F64)
		})
		mean := b.Let("mean", ss.Div(cols.Cvt(k.F64)).Cvt(k.F32))
		scale := b.Let("scale", k.F(1).Div(mean.Add(eps).Sqrt()))
		b.For("i", 0, cols, func(i k.Expr) {
			v := x.At(base.Add(i)).Mul(scale)
			if weighted {
				v = v.Mul(w.At(i))
			}
			b.Store(y, base.Add(i), v)
		})
	})
	b.Schedule("ss_i", k.LoopSchedule{Threads: NormThreads})
	b.Schedule("i", k.LoopSchedule{Threads: NormThreads})
	return b.MustBuild()
}

// CopyRow is CopyRow(x []float32, step []int32, y []float32): y = row
// step[0] of x (rows of len(y) values): a prefill step's last real row,
// the only one whose logits are wanted.
func CopyRow() *k.Kernel {
	b := k.New("CopyRow")
	b.Doc("copies row step[0] of x into y.")
	x, step, y := b.Buffer("x", k.F32), b.Buffer("step", k.I32), b.Buffer("y", k.F32)
	base := b.Let("base", step.At(0).Cvt(k.Int).Mul(y.Len()))
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) { b.Store(y, i, x.At(base.Add(i))) })
	return b.MustBuild()
}

// RopePosWarp is RopePos with one warp per (row, head) and rotation pair i
// on lane i mod 32: the lane forms θ_i from the position by the same i f32
// multiplications by thetaScale that RopePos's running product makes, so
// the bits are RopePos's.
func RopePosWarp(mode, dims int) *k.Kernel {
	b := k.New(fmt.Sprintf("%sPosWarp%d", ropeName(mode), dims))
	b.Doc("rotates the first dims values of each head of x into y by the step's position, a warp per head.")
	x, y := b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	step := b.Buffer("step", k.I32)
	freqs := b.Buffer("freqs", k.F32)
	hd, heads := b.Scalar("headDim", k.Int), b.Scalar("heads", k.Int)
	ts, fs := b.Scalar("thetaScale", k.F32), b.Scalar("freqScale", k.F32)
	r := ropeWarp{mode, dims, freqs, hd, ts, fs}
	b.ParallelFor("t", 0, x.Len().Div(hd), func(t k.Expr) {
		o := b.Let("o", t.Mul(hd))
		pos := b.Let("pos", step.At(1).Cvt(k.Int).Add(t.Div(heads)).Cvt(k.F32))
		r.head(b, x.At, o, pos, func(at, v k.Expr) { b.Store(y, at, v) })
	})
	warpSched(b, "p", "i")
	return b.MustBuild()
}

func ropeName(mode int) string {
	if mode == dsl.RopeNeox {
		return "RopeNeox"
	}
	return "RopeNormal"
}

// ropeWarp is a RoPE's parameters in a warp kernel.
type ropeWarp struct {
	mode, dims int
	freqs      *k.Buf
	hd, ts, fs k.Expr
}

// head rotates the head at offset o (value a read by x(a)) by position
// pos, storing value j of the head (its offset o+j) through store(o+j,
// value): pairs over the lanes of loop "p", the unrotated rest over loop
// "i".
func (r ropeWarp) head(b *k.Builder, x func(a any) k.Expr, o, pos k.Expr, store func(at, v k.Expr)) {
	half := r.dims / 2
	b.For("p", 0, half, func(i k.Expr) {
		theta := b.Acc("theta", k.OpAdd, pos)
		b.For("q", 0, i, func(k.Expr) { b.Set(theta, theta.Get().Mul(r.ts)) })
		a := b.Let("a", theta.Get().Div(r.freqs.At(i)).Mul(r.fs))
		c, s := b.Let("c", a.Cos()), b.Let("s", a.Sin())
		var a0, a1 k.Expr
		if r.mode == dsl.RopeNeox {
			a0 = b.Let("a0", o.Add(i))
			a1 = b.Let("a1", a0.Add(half))
		} else {
			a0 = b.Let("a0", o.Add(i.Mul(2)))
			a1 = b.Let("a1", a0.Add(1))
		}
		x0, x1 := b.Let("x0", x(a0)), b.Let("x1", x(a1))
		store(a0, x0.Mul(c).Sub(x1.Mul(s)))
		store(a1, x0.Mul(s).Add(x1.Mul(c)))
	})
	b.For("i", r.dims, r.hd, func(i k.Expr) { store(o.Add(i), x(o.Add(i))) })
}

// RopeKVStore is a decode step's RoPE of q and of k and its KVStore in
// one launch: RopeKVStore<mode><dims>(q, k, v, qy []float32, kc, vc
// []uint16, step []int32, freqs []float32, headDim int, thetaScale,
// freqScale float32). A warp per head, q's heads first: q's rotated into
// qy rounded to f16 (as the attention reads it: AttentionSplitRounded),
// k's rotated and v's copied, rounded to f16, into the caches' row
// step[1]. The bits of RopePosWarp on q (then rounded) and on k, then
// KVStore.
func RopeKVStore(mode, dims int) *k.Kernel { return ropeKVStore(mode, dims, false) }

// RopeKVStoreNorm is RopeKVStore with each head of q and of k normalized
// first (qwen3's q_norm and k_norm: RMSNorm over the head, weights qw and
// kw of a head's length): RopeKVStoreNorm<mode><dims>(q, k, v, qw, kw, qy
// []float32, kc, vc []uint16, step []int32, freqs []float32, headDim int,
// eps, thetaScale, freqScale float32). RMSNormRows's arithmetic, the sum
// of squares in a warp's tree rather than a CTA's.
func RopeKVStoreNorm(mode, dims int) *k.Kernel { return ropeKVStore(mode, dims, true) }

func ropeKVStore(mode, dims int, norm bool) *k.Kernel {
	name := fmt.Sprintf("%sKVStore%d", ropeName(mode), dims)
	doc := "rotates q into qy and k into the k cache, and stores v into the v cache, at the step's position, a warp per head."
	if norm {
		name = fmt.Sprintf("%sKVStoreNorm%d", ropeName(mode), dims)
		doc = "normalizes and rotates q into qy and k into the k cache, and stores v into the v cache, at the step's position, a warp per head."
	}
	b := k.New(name)
	b.Doc(doc)
	q, kx, v := b.Buffer("q", k.F32), b.Buffer("k", k.F32), b.Buffer("v", k.F32)
	var qw, kw *k.Buf
	if norm {
		qw, kw = b.Buffer("qw", k.F32), b.Buffer("kw", k.F32)
	}
	qy := b.Buffer("qy", k.F32)
	kc, vc := b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	step := b.Buffer("step", k.I32)
	freqs := b.Buffer("freqs", k.F32)
	hd := b.Scalar("headDim", k.Int)
	var eps k.Expr
	if norm {
		eps = b.Scalar("eps", k.F32)
	}
	ts, fs := b.Scalar("thetaScale", k.F32), b.Scalar("freqScale", k.F32)
	r := ropeWarp{mode, dims, freqs, hd, ts, fs}
	// source is the head at o of x as the rotation reads it: normalized by
	// w where norm is set
	source := func(x, w *k.Buf, o k.Expr) func(a any) k.Expr {
		if !norm {
			return x.At
		}
		ss := b.Sum("ss", k.F64, 0, hd, func(i k.Expr) k.Expr {
			xi := b.Let("xi", x.At(o.Add(i)))
			return xi.Mul(xi).Cvt(k.F64)
		})
		mean := b.Let("mean", ss.Div(hd.Cvt(k.F64)).Cvt(k.F32))
		scale := b.Let("scale", k.F(1).Div(mean.Add(eps).Sqrt()))
		return func(a any) k.Expr {
			at := a.(k.Expr)
			return x.At(at).Mul(scale).Mul(w.At(at.Sub(o)))
		}
	}
	nq := b.Let("nq", q.Len().Div(hd))
	b.ParallelFor("t", 0, nq.Add(kx.Len().Div(hd)), func(t k.Expr) {
		row := b.Let("row", step.At(1).Cvt(k.Int))
		pos := b.Let("pos", row.Cvt(k.F32))
		isQ := b.Let("isQ", t.Lt(nq))
		// a loop of one trip or none: the head's kind picks its work
		b.For("hq", 0, k.Select(isQ, k.I(1), k.I(0)), func(k.Expr) {
			o := b.Let("o", t.Mul(hd))
			r.head(b, source(q, qw, o), o, pos, func(at, x k.Expr) { b.Store(qy, at, x.F32ToF16().F16ToF32()) })
		})
		b.For("hk", 0, k.Select(isQ, k.I(0), k.I(1)), func(k.Expr) {
			o := b.Let("o", t.Sub(nq).Mul(hd))
			base := b.Let("base", row.Mul(kx.Len()))
			r.head(b, source(kx, kw, o), o, pos, func(at, x k.Expr) { b.Store(kc, base.Add(at), x.F32ToF16()) })
			b.For("d", 0, hd, func(d k.Expr) { b.Store(vc, base.Add(o).Add(d), v.At(o.Add(d)).F32ToF16()) })
		})
	})
	warpSched(b, "p", "i", "d", "ss_i")
	return b.MustBuild()
}
