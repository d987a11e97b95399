package exec

import (
	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/quant"
)

// genericDot is the generated row dot in ggml's generic order for the
// weight types whose matmul has no x86 order of its own; quant.VecDot
// stays the fallback for the types kernels/ops does not describe yet.
var genericDot = map[quant.Type]func(n int, w, x []byte) float32{
	quant.Q4_1: cpugen.DotQ4_1, quant.Q5_0: cpugen.DotQ5_0, quant.Q5_1: cpugen.DotQ5_1,
	quant.Q4_K: cpugen.DotQ4_K, quant.Q6_K: cpugen.DotQ6_K,
}

func (r *Runner) qRowBytes(n *dsl.Node) int {
	w := &r.m.Weights[n.Weight]
	b, _ := quant.RowBytes(quant.VecDotType(w.Type), w.Dims[0])
	return int(b)
}

// outputRowsOnly reports whether llama.cpp evaluates matmul node id on the
// output rows only: its llama graph drops every other row (ggml_get_rows on
// inp_out_ids) in the last block right after the attention output
// projection, so the last block's FFN and the output head run with one row
// per returned logit vector (src/models/llama.cpp, "il == n_layer - 1").
func (r *Runner) outputRowsOnly(id int) bool {
	g := r.m.Graph
	lastAttn := -1
	for i, n := range g.Nodes {
		if n.Op == dsl.OpAttention {
			lastAttn = i
		}
	}
	if lastAttn < 0 {
		return false
	}
	wo := -1
	for i := lastAttn + 1; i < len(g.Nodes); i++ {
		if g.Nodes[i].Op == dsl.OpMatMul {
			wo = i
			break
		}
	}
	return wo >= 0 && id > wo
}

// lowerMatMul computes y = W·x the way ggml's CPU backend does: each input
// row is quantized once to the weight type's dot-product partner type, then
// every output element is one dot product of a weight row with it. Which
// kernel ggml runs depends on the number of rows (ggml-cpu.c
// ggml_compute_forward_mul_mat: llamafile_sgemm for two rows or more, the
// type's vec_dot for one), and the kernels accumulate in different orders;
// the float types follow that choice. The dots are generated from
// kernels/ops (the x86 orders are Orders of the generic kernels; quant's
// x86variants.go has them by hand, and tests hold the two equal). Output
// rows are split over the workers; each weight row is read once for all
// input rows.
func (r *Runner) lowerMatMul(id int, n *dsl.Node) (func(), error) {
	w := &r.m.Weights[n.Weight]
	x, y := r.bufs[n.In[0]], r.bufs[id]
	in, out := int(w.Dims[0]), n.Cols
	vdt := quant.VecDotType(w.Type)
	qrb := r.qRowBytes(n)
	wrb := w.RowBytes()
	isOut := id == r.outID
	outOnly := r.outputRowsOnly(id) && !r.opt.LogitsAll
	// The kernels for one row and for several (llamafile tinyBLAS needs
	// k%16 == 0 and m%4 == 0, sgemm.cpp tinyBLAS::matmul).
	var one, many func(n int, w, x []byte) float32
	sgemmOK := in%16 == 0 && out%4 == 0
	switch w.Type {
	case quant.F32:
		// llama.cpp's F32 kernels (vec_dot_f32 for one row, tinyBLAS for
		// several) bring stories260K's decode steps from ~1e-3 to ~2e-4
		// nats of llama.cpp; a batch and a token-by-token evaluation then
		// differ like llama.cpp's own do (~1e-3 in a logit).
		one, many = cpugen.DotF32AVX512, cpugen.DotF32AVX512
		if sgemmOK {
			many = cpugen.DotF32TinyBLAS
		}
	case quant.F16:
		one, many = cpugen.DotF16AVX512, cpugen.DotF16AVX512
		if sgemmOK {
			many = cpugen.DotF16TinyBLAS
		}
	case quant.Q8_0:
		// vec_dot_q8_0_q8_0 (one row) and tinyBLAS_Q0_AVX (several)
		// accumulate alike.
		one, many = cpugen.DotQ8_0AVX2, cpugen.DotQ8_0AVX2
	case quant.Q4_0:
		// A multiple of 8 rows goes to the repack buffer (repack.cpp
		// ggml_repack_get_optimal_repack_type: q4_0_8x8_q8_0 with AVX2),
		// the rest runs vec_dot_q4_0_q8_0 / tinyBLAS_Q0_AVX.
		one, many = cpugen.DotQ4_0AVX2, cpugen.DotQ4_0AVX2
		if out%8 == 0 {
			one, many = cpugen.DotQ4_0Repack8x8, cpugen.DotQ4_0Repack8x8
		}
	}
	if one == nil {
		one, many = genericDot[w.Type], genericDot[w.Type]
	}
	var dot func(n int, w, x []byte) float32
	var lo, hi int // rows of this step that the node computes
	task := func(a, b int) {
		q := r.qbuf
		for j := a; j < b; j++ {
			wr := w.Data[j*wrb : (j+1)*wrb]
			for i := lo; i < hi; i++ {
				qr := q[(i-lo)*qrb : (i-lo+1)*qrb]
				if dot != nil {
					y[(i-lo)*out+j] = dot(in, wr, qr)
				} else {
					y[(i-lo)*out+j] = quant.VecDot(w.Type, in, wr, qr)
				}
			}
		}
	}
	return func() {
		lo, hi = 0, r.nRows
		if isOut {
			lo = r.outRow
		}
		rows := hi - lo // the rows llama.cpp's matmul has
		if outOnly {
			rows = r.nRows - r.outRow
		}
		dot = one
		if rows >= 2 {
			dot = many
		}
		for i := lo; i < hi; i++ {
			// llama.cpp on x86 quantizes activations with its AVX2 rounding
			// (127/amax, ties to even); matching it keeps greedy output equal.
			quant.QuantizeRowX86(vdt, x[i*in:(i+1)*in], r.qbuf[(i-lo)*qrb:(i-lo+1)*qrb])
		}
		r.pool.Run(out, 8, task)
	}, nil
}
