package ops

import (
	"fmt"
	"math"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Tiled attention for prefill steps (flash attention on the tensor cores):
// a warp takes 16 query rows of one head and walks the cache in blocks of
// AttnTileBlock positions. For each block the scores S = Q·Kᵀ are a tile
// (the f16 query rows and cache rows as operands), stored to the warp's
// scratch; each row's running maximum and sum advance there (the online
// softmax, masked causally), P = exp(S − max) replaces S, and P·V is a
// second tile whose operand rows are the cache's columns (TileOperand.Step:
// V stays in the cache's row-major layout). The running output in the
// scratch is rescaled by each row's exp(old max − new max) and the block's
// tile added; the last block's output, divided by the sum, is the row's.
// Arithmetic: the products in f32 of f16 operands as AttentionSplit's, but
// P rounded to f16 for its product with V, and the tiles' sums in the
// hardware's order: held to the reference by error bounds.

// AttnTileBlock is the positions of one block: the scores tile's columns.
const AttnTileBlock = 64

// AttnTileRows is the query rows a warp takes.
const AttnTileRows = 16

// AttnTileScratch is the scratch floats a warp uses for head width hd: the
// block's scores, the running and the block's output, and seven floats a
// row (maximum, sum, rescale, two partial maxima and sums).
func AttnTileScratch(hd int) int {
	return AttnTileRows*AttnTileBlock + 2*AttnTileRows*hd + 7*AttnTileRows
}

// AttnTileWidth reports whether AttentionTile takes head width hd: whole
// tile steps along it, and at most 16 pieces of 8 in the output tile.
func AttnTileWidth(hd int) bool { return hd%k.TileK == 0 && hd <= 8*16 }

// AttentionTile is AttentionTileD<hd>(q []float32, kc, vc []uint16, sc
// []float32, step []int32, y []float32, heads, group, kvDim int, scale
// float32): y = softmax attention of the step's rows (row r at position
// step[1]+r attends to positions 0..step[1]+r), q and y rows of heads·hd
// values, the caches' rows kvDim apart (head h reads kv head h/group); sc
// holds AttnTileScratch(hd) floats a warp, a warp per (16 rows, head), the
// tiles of the latest rows first (they hold the most positions). The
// caches must hold AttnTileBlock−1 finite rows past the last row's
// position: a block's padding is read and multiplied by zero.
func AttentionTile(hd int) *k.Kernel {
	if !AttnTileWidth(hd) {
		panic(fmt.Sprintf("AttentionTile: head width %d", hd))
	}
	const R, B = AttnTileRows, AttnTileBlock
	b := k.New(fmt.Sprintf("AttentionTileD%d", hd))
	b.Doc("attends 16 rows of one head per warp over the cache in blocks of 64 positions, on the tensor cores.")
	q, kc, vc := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	sc, step, y := b.Buffer("sc", k.F32), b.Buffer("step", k.I32), b.Buffer("y", k.F32)
	heads, group, dim := b.Scalar("heads", k.Int), b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	scale := b.Scalar("scale", k.F32)
	qd := b.Let("qd", heads.Mul(hd))
	rows := b.Let("rows", q.Len().Div(qd))
	nq := b.Let("nq", rows.Add(R-1).Div(R))
	b.ParallelFor("w", 0, nq.Mul(heads), func(w k.Expr) {
		r0 := b.Let("r0", nq.Sub(1).Sub(w.Div(heads)).Mul(R))
		h := b.Let("h", w.Rem(heads))
		live := b.Let("live", rows.Sub(r0).Min(R))
		kvo := b.Let("kvo", h.Div(group).Mul(hd))
		qo := b.Let("qo", r0.Mul(qd).Add(h.Mul(hd)))
		n0 := b.Let("n0", step.At(1).Cvt(k.Int).Add(r0).Add(1)) // positions row r0 attends to
		last := b.Let("last", n0.Add(live).Sub(1))              // and the tile's last live row
		so := b.Let("so", w.Mul(AttnTileScratch(hd)))
		oo := b.Let("oo", so.Add(R*B))
		bo := b.Let("bo", oo.Add(R*hd))
		mo := b.Let("mo", bo.Add(R*hd))
		lo := b.Let("lo", mo.Add(R))
		ao := b.Let("ao", lo.Add(R))
		po := b.Let("po", ao.Add(R))   // two partial maxima a row
		ps := b.Let("ps", po.Add(2*R)) // and two partial sums
		b.For("zo", 0, R*hd, func(i k.Expr) { b.Store(sc, oo.Add(i), k.F(0)) })
		b.For("zm", 0, R, func(i k.Expr) {
			b.Store(sc, mo.Add(i), k.F(math.Inf(-1)))
			b.Store(sc, lo.Add(i), k.F(0))
		})
		b.For("jb", 0, last.Add(B-1).Div(B), func(jb k.Expr) {
			j0 := b.Let("j0", jb.Mul(B))
			s := b.NewTile("s", 1, B/8)
			b.For("ks", 0, hd/k.TileK, func(kk k.Expr) {
				kd := b.Let("kd", kk.Mul(k.TileK))
				b.TileMMA(s,
					k.TileOperand{Buf: q, Off: qo.Add(kd), Stride: qd, Rows: live},
					k.TileOperand{Buf: kc, Off: j0.Mul(dim).Add(kvo).Add(kd), Stride: dim, Rows: last.Sub(j0)})
			})
			b.TileStore(s, k.TileOperand{Buf: sc, Off: so, Stride: k.I(B), Rows: k.I(R)}, k.I(B))
			// the softmax step, every row at once: lane i takes half
			// i%2 of row i/2's block (its maximum, then its weights and
			// their sum), then lane r advances row r's state; no lane
			// reads what another wrote before the loop's barrier
			hi := func(r k.Expr) k.Expr { // row r's positions in the block
				return b.Let("hi", n0.Add(r).Min(last).Sub(j0).Min(B))
			}
			b.For("hm", 0, 2*R, func(i k.Expr) {
				r := b.Let("r", i.Div(2))
				c0 := b.Let("c0", i.Rem(2).Mul(B/2))
				srow := b.Let("srow", so.Add(r.Mul(B)))
				M := b.Acc("M", k.OpMax, k.F(math.Inf(-1)))
				b.For("cm", c0, hi(r).Min(c0.Add(B/2)), func(c k.Expr) { b.Fold(M, sc.At(srow.Add(c)).Mul(scale)) })
				b.Store(sc, po.Add(i), M.Get())
			})
			rowMax := func(r k.Expr) k.Expr { // the row's maximum so far and in this block
				return b.Let("m", sc.At(mo.Add(r)).Max(sc.At(po.Add(r.Mul(2)))).Max(sc.At(po.Add(r.Mul(2)).Add(1))))
			}
			b.For("he", 0, 2*R, func(i k.Expr) {
				r := b.Let("r", i.Div(2))
				c0 := b.Let("c0", i.Rem(2).Mul(B/2))
				srow := b.Let("srow", so.Add(r.Mul(B)))
				h, m := hi(r), rowMax(r)
				S := b.Acc("S", k.OpAdd, k.F(0))
				b.For("ce", c0, c0.Add(B/2), func(c k.Expr) {
					p := b.Let("p", k.Select(c.Lt(h), sc.At(srow.Add(c)).Mul(scale).Sub(m).Exp(), k.F(0)))
					b.Store(sc, srow.Add(c), p)
					b.Fold(S, p)
				})
				b.Store(sc, ps.Add(i), S.Get())
			})
			b.For("hu", 0, R, func(r k.Expr) {
				m := rowMax(r)
				alpha := b.Let("alpha", sc.At(mo.Add(r)).Sub(m).Exp())
				sum := sc.At(ps.Add(r.Mul(2))).Add(sc.At(ps.Add(r.Mul(2)).Add(1)))
				b.Store(sc, lo.Add(r), sc.At(lo.Add(r)).Mul(alpha).Add(sum))
				b.Store(sc, mo.Add(r), m)
				b.Store(sc, ao.Add(r), alpha)
			})
			o := b.NewTile("o", 1, hd/8)
			b.For("kv", 0, B/k.TileK, func(kk k.Expr) {
				kj := b.Let("kj", kk.Mul(k.TileK))
				b.TileMMA(o,
					k.TileOperand{Buf: sc, Off: so.Add(kj), Stride: k.I(B), Rows: k.I(R)},
					k.TileOperand{Buf: vc, Off: j0.Add(kj).Mul(dim).Add(kvo), Stride: k.I(1), Rows: k.I(hd), Step: dim})
			})
			b.TileStore(o, k.TileOperand{Buf: sc, Off: bo, Stride: k.I(hd), Rows: k.I(R)}, k.I(hd))
			b.For("e", 0, R*hd, func(e k.Expr) {
				b.Store(sc, oo.Add(e), sc.At(oo.Add(e)).Mul(sc.At(ao.Add(e.Div(hd)))).Add(sc.At(bo.Add(e))))
			})
		})
		b.For("f", 0, live.Mul(hd), func(e k.Expr) {
			r := b.Let("rr", e.Div(hd))
			b.Store(y, qo.Add(r.Mul(qd)).Add(e.Rem(hd)), sc.At(oo.Add(e)).Div(sc.At(lo.Add(r))))
		})
	})
	warpSched(b, "zo", "zm", "hm", "he", "hu", "e", "f")
	return b.MustBuild()
}
