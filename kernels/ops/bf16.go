package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// BF16 weights, the type Hugging Face checkpoints keep (jitllm convert
// HF-DIR writes them as they are). The CPU multiplies them as ggml's
// generic ggml_vec_dot_bf16 does (kernels/quant dotBF16): the activation
// rounded to bf16 first (quant.F32ToBF16), each product of two bf16 values
// in f32, the sum in f64. MatVecBF16 is that arithmetic in that order,
// MatVecWarpBF16 in the warp's. The embedding and the prefill products'
// f16 copies take BF16 as a BlockDecode of one value a block (Embed,
// DequantF16), and a prefill product's activation is rounded as the
// mat-vec rounds it, then to f16 for the tensor cores (RoundBF16F16).
// F16 matrices reach the tensor cores the same way (F16, RoundF16).

// BF16 decodes a bfloat16 row as blocks of one value: its two bytes are
// the top half of the f32 (quant.BF16ToF32). It is not one of Blocks():
// the CPU's BF16 kernels are kernels/quant's, and nothing sums BF16 in
// integers.
var BF16 = BlockDecode{Name: "BF16", QK: 1, Bytes: 2, Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
	emit(k.I(0), widenBF16(blk.Aligned(k.U16, 0)))
}}

// MatVecBF16 is MatVecBF16(w []byte, x, y []float32) for bf16 rows: x
// rounded to bf16 first, then as MatVecF32 (ggml_vec_dot_bf16's order).
func MatVecBF16() *k.Kernel {
	return floatMatVec("BF16", 2, func(w *k.Buf, o k.Expr) k.Expr { return widenBF16(w.U16(o)) }, roundBF16)
}

// MatVecWarpBF16 is MatVecBF16 split as MatVecWarpF32: the decode
// mat-vec of a BF16 matrix.
func MatVecWarpBF16() *k.Kernel {
	return floatMatVecWarp("BF16", 2, func(w *k.Buf, o k.Expr) k.Expr { return widenBF16(w.Aligned(k.U16, o)) }, roundBF16)
}

// RoundBF16F16 is RoundBF16F16(x []float32, y []uint16): each value of x
// rounded to bf16 as the BF16 mat-vecs round their activation, then to the
// nearest f16 (the same value wherever f16's range holds it), a prefill
// product's operand for MatMulBlock.
func RoundBF16F16() *k.Kernel {
	return roundF16Kernel("RoundBF16F16", "sets y to x rounded to bf16, then to f16.", roundBF16)
}

// RoundF16 is RoundF16(x []float32, y []uint16): each value of x rounded
// to f16 as the F16 mat-vecs round their activation (ggml's vec_dot_type
// of F16), the operand of an F16 matrix's prefill product on the tensor
// cores.
func RoundF16() *k.Kernel {
	return roundF16Kernel("RoundF16", "sets y to x rounded to f16.", keepF32)
}

// roundF16Kernel stores each value of x, rounded by round, as the nearest
// f16.
func roundF16Kernel(name, doc string, round func(b *k.Builder, x k.Expr) k.Expr) *k.Kernel {
	b := k.New(name)
	b.Doc(doc)
	x, y := b.Buffer("x", k.F32), b.Buffer("y", k.U16)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) { b.Store(y, i, round(b, x.At(i)).F32ToF16()) })
	return b.MustBuild()
}

// F16 decodes an f16 row as blocks of one value, so that DequantF16
// copies an F16 matrix into the f16 operand of a prefill product (a
// resident copy, or the shared scratch every step) as it decodes the
// quantized types: the bits come back as they are, NaNs aside.
var F16 = BlockDecode{Name: "F16", QK: 1, Bytes: 2, Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
	emit(k.I(0), blk.Aligned(k.U16, 0).F16ToF32())
}}

// widenBF16 is the f32 of the bf16 bits h (U16).
func widenBF16(h k.Expr) k.Expr { return h.Cvt(k.U32).Shl(16).F32FromBits() }

// roundBF16 is x (F32) rounded to bf16 and widened, quant.F32ToBF16's
// rounding: nearest even on the 16 bits dropped; a NaN keeps its top bits
// with the quiet bit set (the rounding's carry would make it inf or
// another NaN).
func roundBF16(b *k.Builder, x k.Expr) k.Expr {
	u := b.Let("u", x.F32Bits())
	nan := u.And(0x7fffffff).Gt(0x7f800000)
	even := u.Add(u.Shr(16).And(1).Add(0x7fff))
	return k.Select(nan, u.Or(0x400000), even).And(0xffff0000).F32FromBits()
}
