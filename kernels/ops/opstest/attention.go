package opstest

import (
	"math"

	"github.com/jitllm/jitllm/kernels/quant"
)

// AttentionRef is softmax attention in float64 of a step's rows (row r at
// position pos+r attending to positions 0..pos+r; q rows of heads·hd
// values) over f16 caches whose rows are dim apart (head h reads kv head
// h/group), the query rounded to f16 as the GPU kernels read it.
func AttentionRef(q []float32, kc, vc []uint16, pos, hd, heads, group, dim int, scale float32) []float64 {
	out := make([]float64, len(q))
	for tp := 0; tp < len(q)/hd; tp++ {
		row, h := tp/heads, tp%heads
		n := pos + row + 1
		off := (h / group) * hd
		qh := make([]float64, hd)
		for d := range qh {
			qh[d] = float64(quant.F16ToF32(quant.F32ToF16(q[tp*hd+d])))
		}
		s := make([]float64, n)
		top := math.Inf(-1)
		for j := range s {
			for d := 0; d < hd; d++ {
				s[j] += float64(qh[d] * float64(quant.F16ToF32(kc[j*dim+off+d])))
			}
			s[j] *= float64(scale)
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
			out[tp*hd+d] = o / sum
		}
	}
	return out
}
