package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
)

// AttentionSplit and AttentionMerge give softmax attention over the f16
// caches within f32 rounding: against a float64 reference (the f16 query
// as both kernels read it) on steps of one and of three rows, at positions
// inside the first piece, past a piece of 32 and where pieces lengthen
// beyond a warp (n > 32·AttnSplitChunks), with a large scale so that the
// pieces' maxima differ.
func TestAttentionSplitMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const hd, heads, kvHeads, ctx = 64, 4, 2, 1200
	dim, group := kvHeads*hd, heads/kvHeads
	kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
	for i := range kc {
		kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
	}
	for _, c := range []struct {
		rows, pos int
		scale     float32
	}{{1, 0, 0.125}, {1, 20, 0.125}, {1, 70, 1.5}, {3, 500, 0.125}, {1, 1100, 0.7}} {
		q := make([]float32, c.rows*heads*hd)
		for i := range q {
			q[i] = float32(r.NormFloat64())
		}
		step := []int32{0, int32(c.pos)}
		chunks := ops.AttnSplitChunks
		part := make([]float32, len(q)/hd*chunks*(hd+2))
		sc := make([]float32, len(q)/hd*ctx)
		if err := k.Run(ops.AttentionSplit(), q, kc, vc, part, step, sc, hd, heads, group, dim, ctx, chunks, c.scale); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(q))
		if err := k.Run(ops.AttentionMerge(), part, step, got, hd, heads, chunks); err != nil {
			t.Fatal(err)
		}
		var worst float64
		for tp := 0; tp < len(q)/hd; tp++ {
			row, h := tp/heads, tp%heads
			n := c.pos + row + 1
			off := (h / group) * hd
			s := make([]float64, n)
			top := math.Inf(-1)
			for j := range s {
				for d := 0; d < hd; d++ {
					s[j] += float64(float64(f16r(q[tp*hd+d])) * float64(quant.F16ToF32(kc[j*dim+off+d])))
				}
				s[j] *= float64(c.scale)
				top = math.Max(top, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - top)
				sum += s[j]
			}
			for d := 0; d < hd; d++ {
				var o float64
				for j := range s {
					o += float64(s[j] * float64(quant.F16ToF32(vc[j*dim+off+d])))
				}
				worst = math.Max(worst, math.Abs(float64(got[tp*hd+d])-o/sum))
			}
		}
		if worst > 1e-5 {
			t.Errorf("%d rows at position %d (scale %v): largest difference from the reference %.3g", c.rows, c.pos, c.scale, worst)
		}
	}
}
