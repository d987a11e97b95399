package ops_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// AttentionBlock gives softmax attention over the f16 caches within the
// rounding of P to f16 (relative 2^-11 a weight): against the float64
// reference, for two head widths, steps of fewer rows than a warp's, of
// one warp's, and past one CTA's rows, at positions that
// start, cross and end blocks, with a large scale (the maximum moves, the
// rescaling runs) and grouped heads.
func TestAttentionBlockMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, hd := range []int{64, 128} {
		const heads, kvHeads, ctx = 4, 2, 400
		dim, group := kvHeads*hd, heads/kvHeads
		kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
		for i := range kc {
			kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
			vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		for _, c := range []struct {
			rows, pos int
			scale     float32
		}{{1, 0, 0.125}, {1, 300, 0.7}, {5, 3, 0.125}, {16, 60, 1.5}, {37, 100, 0.125}, {20, 250, 0.7}, {70, 120, 0.3}} {
			q := make([]float32, c.rows*heads*hd)
			for i := range q {
				q[i] = float32(r.NormFloat64())
			}
			step := []int32{0, int32(c.pos)}
			want := opstest.AttentionRef(q, kc, vc, c.pos, hd, heads, group, dim, c.scale)
			blk := make([]float32, len(q))
			if err := k.Run(ops.AttentionBlock(hd), q, kc, vc, step, blk, heads, group, dim, c.scale); err != nil {
				t.Fatal(err)
			}
			// the Q8_0 form: the same outputs, and QuantizeQ8_0's quants of them
			y8, xq, xd := make([]float32, len(q)), make([]byte, len(q)), make([]float32, len(q)/32)
			if err := k.Run(ops.AttentionBlockQ8_0(hd, 1), q, kc, vc, step, y8, xq, xd, heads, group, dim, c.scale); err != nil {
				t.Fatal(err)
			}
			wq, wd := make([]byte, len(q)), make([]float32, len(q)/32)
			if err := k.Run(ops.QuantizeQ8_0(), y8, wq, wd); err != nil {
				t.Fatal(err)
			}
			for i := range y8 {
				if y8[i] != blk[i] || xq[i] != wq[i] || xd[i/32] != wd[i/32] {
					t.Fatalf("AttentionBlockQ8_0 value %d: %v, quant %d scale %v; want %v, %d, %v", i, y8[i], int8(xq[i]), xd[i/32], blk[i], int8(wq[i]), wd[i/32])
				}
			}
			if c.rows == 1 {
				// a CTA a group: the same attention (the heads' rows of one
				// tile), its Q8_0 form the same quants
				checkAttentionBlockHeads(t, hd, q, kc, vc, step, blk, heads, group, dim, c.scale)
			}
			var worst float64
			for i, w := range want {
				worst = math.Max(worst, math.Abs(float64(blk[i])-w))
			}
			if worst > 1e-3 || math.IsNaN(worst) {
				t.Errorf("head width %d, %d rows at position %d (scale %v): largest difference from the reference %.3g", hd, c.rows, c.pos, c.scale, worst)
			}
			t.Logf("head width %d, %d rows at position %d: largest difference %.3g", hd, c.rows, c.pos, worst)
		}
	}
}

// AttentionBlockHeads takes groups of one head, of several and of more
// than a tile's 16 rows (runs of 16, 16 and 2 heads).
func TestAttentionBlockHeadsGroups(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const hd, ctx, pos = 64, 256, 150
	for _, g := range []struct{ heads, kvHeads int }{{3, 3}, {8, 2}, {34, 1}} {
		dim, group := g.kvHeads*hd, g.heads/g.kvHeads
		kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
		for i := range kc {
			kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
			vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		q := make([]float32, g.heads*hd)
		for i := range q {
			q[i] = float32(r.NormFloat64())
		}
		step, blk := []int32{0, pos}, make([]float32, len(q))
		if err := k.Run(ops.AttentionBlockWarps(hd, 1), q, kc, vc, step, blk, g.heads, group, dim, float32(0.125)); err != nil {
			t.Fatal(err)
		}
		checkAttentionBlockHeads(t, hd, q, kc, vc, step, blk, g.heads, group, dim, 0.125)
	}
}

// checkAttentionBlockHeads runs AttentionBlockHeads and its Q8_0 form on a
// one-row step and checks their output against AttentionBlock's (blk):
// the same within the tiles' rounding (another row order of one tile's
// sums), the quants QuantizeQ8_0's of their own output.
func checkAttentionBlockHeads(t *testing.T, hd int, q []float32, kc, vc []uint16, step []int32, blk []float32, heads, group, dim int, scale float32) {
	t.Helper()
	y, y8, xq, xd := make([]float32, len(q)), make([]float32, len(q)), make([]byte, len(q)), make([]float32, len(q)/32)
	if err := k.Run(ops.AttentionBlockHeads(hd, false), q, kc, vc, step, y, heads, group, dim, scale); err != nil {
		t.Fatal(err)
	}
	if err := k.Run(ops.AttentionBlockHeads(hd, true), q, kc, vc, step, y8, xq, xd, heads, group, dim, scale); err != nil {
		t.Fatal(err)
	}
	wq, wd := make([]byte, len(q)), make([]float32, len(q)/32)
	if err := k.Run(ops.QuantizeQ8_0(), y8, wq, wd); err != nil {
		t.Fatal(err)
	}
	// the blocks split over warps: the same rows, the same sums
	for _, w := range []int{2, 4} {
		ys := make([]float32, len(q))
		if err := k.Run(ops.AttentionBlockHeadsSplit(hd, false, w), q, kc, vc, step, ys, heads, group, dim, scale); err != nil {
			t.Fatal(err)
		}
		for i := range ys {
			if ys[i] != y[i] {
				t.Fatalf("AttentionBlockHeadsSplit over %d warps, value %d: %v, AttentionBlockHeads' %v", w, i, ys[i], y[i])
			}
		}
	}
	for i := range y {
		if math.Abs(float64(y[i]-blk[i])) > 1e-5 || y8[i] != y[i] || xq[i] != wq[i] || xd[i/32] != wd[i/32] {
			t.Fatalf("AttentionBlockHeads value %d: %v (Q8_0 form %v, quant %d scale %v); AttentionBlock's %v, quant %d, scale %v",
				i, y[i], y8[i], int8(xq[i]), xd[i/32], blk[i], int8(wq[i]), wd[i/32])
		}
	}
}

// AttentionBlockSplit's pieces folded by AttentionMerge (and its Q8_0 form)
// give a decode row's attention within AttentionBlock's bound of the float64
// reference, at positions inside the first block, on a block's edges and
// over many pieces; the pieces past the position that the merge reads are
// written empty (the part buffer starts as NaNs). A CTA takes a group's
// heads together: groups of 2 and 1 heads, and one of 34 (runs of 16, 16
// and 2 heads).
func TestAttentionBlockSplitMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, sh := range []struct{ hd, heads, kvHeads, ctx int }{
		{64, 4, 2, 2176}, {128, 4, 2, 2176}, {64, 3, 3, 800}, {64, 34, 1, 800},
	} {
		hd, heads, kvHeads, ctx := sh.hd, sh.heads, sh.kvHeads, sh.ctx
		dim, group := kvHeads*hd, heads/kvHeads
		kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
		for i := range kc {
			kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
			vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		split, merge, merge8 := ops.AttentionBlockSplit(hd), ops.AttentionMerge(), ops.AttentionMergeQ8_0()
		for _, c := range []struct {
			pos, chunks int
			scale       float32
		}{{0, 32, 0.125}, {62, 32, 0.125}, {63, 32, 1.5}, {64, 32, 0.125}, {99, 32, 0.7}, {700, 32, 0.125}, {2047, 32, 0.3}, {2100, 32, 1.5},
			{5, 128, 0.125}, {64, 128, 0.125}, {511, 128, 0.7}, {2047, 128, 0.3}} {
			chunks := c.chunks
			if c.pos >= ctx-k.AttnBlock {
				continue
			}
			q := make([]float32, heads*hd)
			for i := range q {
				q[i] = float32(r.NormFloat64())
			}
			step := []int32{0, int32(c.pos)}
			part := make([]float32, ops.AttnPartLen(heads, chunks, hd))
			for i := range part {
				part[i] = float32(math.NaN())
			}
			if err := k.Run(split, q, kc, vc, step, part, heads, group, dim, chunks, c.scale); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, len(q))
			if err := k.Run(merge, part, step, y, hd, heads, chunks); err != nil {
				t.Fatal(err)
			}
			y8, xq, xd := make([]float32, len(q)), make([]byte, len(q)), make([]float32, len(q)/32)
			if err := k.Run(merge8, part, step, y8, xq, xd, hd, heads, chunks); err != nil {
				t.Fatal(err)
			}
			want := opstest.AttentionRef(q, kc, vc, c.pos, hd, heads, group, dim, c.scale)
			var worst float64
			for i, w := range want {
				worst = math.Max(worst, math.Abs(float64(y[i])-w))
				if y8[i] != y[i] {
					t.Fatalf("position %d: AttentionMergeQ8_0 value %d %v, AttentionMerge's %v", c.pos, i, y8[i], y[i])
				}
			}
			if worst > 1e-3 || math.IsNaN(worst) {
				t.Errorf("%d heads of width %d, %d a group, at position %d in %d pieces (scale %v): largest difference from the reference %.3g", heads, hd, group, c.pos, chunks, c.scale, worst)
			}
			t.Logf("%d heads of width %d, %d a group, at position %d in %d pieces: largest difference %.3g", heads, hd, group, c.pos, chunks, worst)
		}
	}
}

// Rendered for dependent launch, the short one-row attention prefetches the
// caches' rows into L2 before its wait for the kernel before, having
// loaded only the settled step buffer (the position) before it.
func TestAttentionPrefetchesBeforeWait(t *testing.T) {
	for _, kern := range []*k.Kernel{ops.AttentionBlockHeads(128, true), ops.AttentionBlockHeads(64, false)} {
		src, err := ptx.Render(kern, ptx.Target{SM: 90, Dependent: func(*k.Kernel) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		wait := strings.Index(src, "griddepcontrol.wait")
		if n := strings.Count(src[:max(wait, 0)], "prefetch.global.L2"); wait < 0 || n != 2 {
			t.Errorf("%s: %d prefetches before the wait (at %d), want the two caches'", kern.Name, n, wait)
		}
		if n := strings.Count(src[:max(wait, 0)], "ld.global"); n != 1 {
			t.Errorf("%s: %d loads before the wait, want the position's alone", kern.Name, n)
		}
	}
}
