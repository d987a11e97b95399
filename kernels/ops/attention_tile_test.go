package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// AttentionTile gives softmax attention over the f16 caches within the
// rounding of P to f16 (relative 2^-11 a weight): against the float64
// reference, for both head widths it takes, steps of fewer rows than a
// tile, of one tile and of a part tile past whole ones, at positions that
// start, cross and end blocks, with a large scale (the maximum moves, the
// rescaling runs) and grouped heads.
func TestAttentionTileMatchesReference(t *testing.T) {
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
		}{{1, 0, 0.125}, {5, 3, 0.125}, {16, 60, 1.5}, {37, 100, 0.125}, {20, 250, 0.7}} {
			q := make([]float32, c.rows*heads*hd)
			for i := range q {
				q[i] = float32(r.NormFloat64())
			}
			step := []int32{0, int32(c.pos)}
			warps := (c.rows + ops.AttnTileRows - 1) / ops.AttnTileRows * heads
			sc := make([]float32, warps*ops.AttnTileScratch(hd))
			got := make([]float32, len(q))
			if err := k.Run(ops.AttentionTile(hd), q, kc, vc, sc, step, got, heads, group, dim, c.scale); err != nil {
				t.Fatal(err)
			}
			want := opstest.AttentionRef(q, kc, vc, c.pos, hd, heads, group, dim, c.scale)
			var worst float64
			for i, w := range want {
				worst = math.Max(worst, math.Abs(float64(got[i])-w))
			}
			if worst > 1e-3 {
				t.Errorf("head width %d, %d rows at position %d (scale %v): largest difference from the reference %.3g", hd, c.rows, c.pos, c.scale, worst)
			}
			t.Logf("head width %d, %d rows at position %d: largest difference %.3g", hd, c.rows, c.pos, worst)
		}
	}
}
