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
		part := make([]float32, ops.AttnPartLen(len(q)/hd, chunks, hd))
		sc := make([]float32, len(q)/hd*ctx)
		if err := k.Run(ops.AttentionSplit(), q, kc, vc, part, step, sc, hd, heads, group, dim, ctx, chunks, c.scale); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(q))
		if err := k.Run(ops.AttentionMerge(), part, step, got, hd, heads, chunks); err != nil {
			t.Fatal(err)
		}
		// the query rounded first, AttentionSplitRounded's pieces are the same bits
		qr := make([]float32, len(q))
		for i, v := range q {
			qr[i] = quant.F16ToF32(quant.F32ToF16(v))
		}
		partR := make([]float32, len(part))
		if err := k.Run(ops.AttentionSplitRounded(), qr, kc, vc, partR, step, make([]float32, len(sc)), hd, heads, group, dim, ctx, chunks, c.scale); err != nil {
			t.Fatal(err)
		}
		for i := range len(q) / hd * chunks * (hd + 2) { // the pieces (the merge's weights follow)
			if math.Float32bits(part[i]) != math.Float32bits(partR[i]) {
				t.Fatalf("%d rows at position %d: piece value %d %v, rounded query's %v", c.rows, c.pos, i, part[i], partR[i])
			}
		}
		// merged and quantized at once: AttentionMerge's bits, then the quantizer's
		for _, qc := range []struct {
			merge, quantize *k.Kernel
			qk              int
		}{{ops.AttentionMergeQ8_0(), ops.QuantizeQ8_0(), 32}, {ops.AttentionMergeQ8_K(), ops.QuantizeQ8_K(), 256}} {
			gotQ, xq, xd := make([]float32, len(q)), make([]byte, len(q)), make([]float32, len(q)/qc.qk)
			if err := k.Run(qc.merge, part, step, gotQ, xq, xd, hd, heads, chunks); err != nil {
				t.Fatal(err)
			}
			wq, wd := make([]byte, len(q)), make([]float32, len(q)/qc.qk)
			if err := k.Run(qc.quantize, got, wq, wd); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				b := i / qc.qk
				if math.Float32bits(gotQ[i]) != math.Float32bits(got[i]) || xq[i] != wq[i] || math.Float32bits(xd[b]) != math.Float32bits(wd[b]) {
					t.Fatalf("%s, %d rows at position %d, value %d: %v %d %v, want %v %d %v", qc.merge.Name, c.rows, c.pos, i, gotQ[i], xq[i], xd[b], got[i], wq[i], wd[b])
				}
			}
		}
		want := opstest.AttentionRef(q, kc, vc, c.pos, hd, heads, group, dim, c.scale)
		var worst float64
		for i, w := range want {
			worst = math.Max(worst, math.Abs(float64(got[i])-w))
		}
		if worst > 1e-5 {
			t.Errorf("%d rows at position %d (scale %v): largest difference from the reference %.3g", c.rows, c.pos, c.scale, worst)
		}
	}
}

// TestAttentionMergeOddWidth checks the merge of a head width that is not
// a multiple of its four values a lane (the rest folded one value at a
// time) against the float64 reference.
func TestAttentionMergeOddWidth(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const hd, heads, kvHeads, ctx, pos = 6, 4, 2, 300, 260
	dim, group, chunks := kvHeads*hd, heads/kvHeads, ops.AttnSplitChunks
	kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
	for i := range kc {
		kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
	}
	q := make([]float32, heads*hd)
	for i := range q {
		q[i] = quant.F16ToF32(quant.F32ToF16(float32(r.NormFloat64())))
	}
	step := []int32{0, pos}
	part := make([]float32, ops.AttnPartLen(heads, chunks, hd))
	if err := k.Run(ops.AttentionSplit(), q, kc, vc, part, step, make([]float32, heads*ctx), hd, heads, group, dim, ctx, chunks, float32(0.4)); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(q))
	if err := k.Run(ops.AttentionMerge(), part, step, got, hd, heads, chunks); err != nil {
		t.Fatal(err)
	}
	want := opstest.AttentionRef(q, kc, vc, pos, hd, heads, group, dim, 0.4)
	for i, w := range want {
		if d := math.Abs(float64(got[i]) - w); d > 1e-5 || math.IsNaN(d) {
			t.Fatalf("value %d (of a head's %d): %v, reference %v", i, hd, got[i], w)
		}
	}
}
