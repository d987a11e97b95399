package quant

import (
	"fmt"
	"math"
)

// RowSize is the byte size of a row of n values of type t, or -1 when t is
// unknown or n is not a whole number of blocks. It is RowBytes for callers
// that have already validated their shapes.
func RowSize(t Type, n int) int {
	s, err := RowBytes(t, int64(n))
	if err != nil {
		return -1
	}
	return int(s)
}

// checkRow validates the element count against t's block size and the byte
// slice against the row size, so the kernels can index without surprises.
func checkRow(t Type, n int, b []byte, what string) error {
	l, ok := layouts[t]
	if !ok {
		return fmt.Errorf("quant: unknown type %d", uint32(t))
	}
	if n%l.BlockSize != 0 {
		return fmt.Errorf("quant: %s: %d values is not a multiple of %s's block size %d", what, n, l.Name, l.BlockSize)
	}
	if need := n / l.BlockSize * l.BlockBytes; len(b) < need {
		return fmt.Errorf("quant: %s: %s row of %d values needs %d bytes, have %d", what, l.Name, n, need, len(b))
	}
	return nil
}

// CanDequantize reports whether Dequantize decodes t.
func CanDequantize(t Type) bool {
	switch t {
	case F32, F16, BF16, F64, I8, I16, I32,
		Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
		Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
		IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0:
		return true
	}
	return false
}

// Dequantize decodes len(dst) values of type t from src, as ggml's
// dequantize_row_* (to_float) does. len(dst) must be a multiple of t's block
// size and src must hold at least the row's bytes.
func Dequantize(t Type, src []byte, dst []float32) error {
	if !CanDequantize(t) {
		return fmt.Errorf("quant: cannot dequantize %s", t)
	}
	if err := checkRow(t, len(dst), src, "Dequantize"); err != nil {
		return err
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(le32(src, 4*i))
		}
	case F16:
		for i := range dst {
			dst[i] = fp16(src, 2*i)
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(le16(src, 2*i))
		}
	case F64:
		for i := range dst {
			lo, hi := uint64(le32(src, 8*i)), uint64(le32(src, 8*i+4))
			dst[i] = float32(math.Float64frombits(lo | hi<<32))
		}
	case I8:
		for i := range dst {
			dst[i] = float32(int8(src[i]))
		}
	case I16:
		for i := range dst {
			dst[i] = float32(int16(le16(src, 2*i)))
		}
	case I32:
		for i := range dst {
			dst[i] = float32(int32(le32(src, 4*i)))
		}
	case Q4_0:
		dequantQ4_0(src, dst)
	case Q4_1:
		dequantQ4_1(src, dst)
	case Q5_0:
		dequantQ5_0(src, dst)
	case Q5_1:
		dequantQ5_1(src, dst)
	case Q8_0:
		dequantQ8_0(src, dst)
	case Q8_1:
		dequantQ8_1(src, dst)
	case Q2_K:
		dequantQ2_K(src, dst)
	case Q3_K:
		dequantQ3_K(src, dst)
	case Q4_K:
		dequantQ4_K(src, dst)
	case Q5_K:
		dequantQ5_K(src, dst)
	case Q6_K:
		dequantQ6_K(src, dst)
	case Q8_K:
		dequantQ8_K(src, dst)
	case IQ4_NL:
		dequantIQ4_NL(src, dst)
	case IQ4_XS:
		dequantIQ4_XS(src, dst)
	case MXFP4:
		dequantMXFP4(src, dst)
	case TQ1_0:
		dequantTQ1_0(src, dst)
	case TQ2_0:
		dequantTQ2_0(src, dst)
	}
	return nil
}

// VecDotType is the type ggml's CPU backend converts the activation row into
// before it calls the vec_dot kernel for a weight row of type t (the
// vec_dot_type column of ggml-cpu's type_traits_cpu). It returns t itself for
// types without a vec_dot (Q8_K, the integer types).
func VecDotType(t Type) Type {
	switch t {
	case Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4:
		return Q8_0
	case Q4_1, Q5_1, Q8_1:
		return Q8_1
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, TQ1_0, TQ2_0,
		IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M:
		return Q8_K
	}
	return t
}

// CanVecDot reports whether VecDot handles weight rows of type t.
func CanVecDot(t Type) bool {
	switch t {
	case F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
		Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0:
		return true
	}
	return false
}

// VecDot is the dot product of one weight row w (n values of type t) with an
// activation row xq already quantized to VecDotType(t), accumulated the way
// ggml's generic C vec_dot kernels do (integer sums per block, float32 across
// blocks; float64 across elements for F32/F16/BF16). It does not allocate.
// It panics when t has no kernel or a slice is shorter than its row, as a
// slice index would.
func VecDot(t Type, n int, w []byte, xq []byte) float32 {
	switch t {
	case F32:
		return dotF32(n, w, xq)
	case F16:
		return dotF16(n, w, xq)
	case BF16:
		return dotBF16(n, w, xq)
	case Q4_0:
		return dotQ4_0(n, w, xq)
	case Q4_1:
		return dotQ4_1(n, w, xq)
	case Q5_0:
		return dotQ5_0(n, w, xq)
	case Q5_1:
		return dotQ5_1(n, w, xq)
	case Q8_0:
		return dotQ8_0(n, w, xq)
	case Q8_1:
		return dotQ8_1(n, w, xq)
	case Q2_K:
		return dotQ2_K(n, w, xq)
	case Q3_K:
		return dotQ3_K(n, w, xq)
	case Q4_K:
		return dotQ4_K(n, w, xq)
	case Q5_K:
		return dotQ5_K(n, w, xq)
	case Q6_K:
		return dotQ6_K(n, w, xq)
	case IQ4_NL:
		return dotIQ4_NL(n, w, xq)
	case IQ4_XS:
		return dotIQ4_XS(n, w, xq)
	case MXFP4:
		return dotMXFP4(n, w, xq)
	case TQ1_0:
		return dotTQ1_0(n, w, xq)
	case TQ2_0:
		return dotTQ2_0(n, w, xq)
	}
	panic(fmt.Sprintf("quant: no vec_dot kernel for %s", t))
}

// CanQuantize reports whether Quantize (and QuantizeRow) encode t.
func CanQuantize(t Type) bool {
	switch t {
	case F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K,
		Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, TQ1_0, TQ2_0, MXFP4:
		return true
	}
	return false
}

// QuantizeRow encodes the activation row src into dst as type t with ggml's
// scalar reference quantizer (quantize_row_*_ref), which is what ggml's
// from_float does on builds without SIMD. For Q8_0 and Q8_1 the x86 AVX/AVX2
// build rounds differently; see QuantizeRowX86. It does not allocate.
func QuantizeRow(t Type, src []float32, dst []byte) error {
	return quantize(t, src, dst, false)
}

// QuantizeRowX86 is QuantizeRow as ggml's x86 AVX/AVX2 CPU build computes it:
// its quantize_row_q8_0 and quantize_row_q8_1 scale by 127/amax (not
// 1/(amax/127)) and round half to even (not half away from zero). Every other
// type is the same as QuantizeRow (x86 quantize_row_q8_K is the reference).
func QuantizeRowX86(t Type, src []float32, dst []byte) error {
	return quantize(t, src, dst, true)
}

// Quantize encodes src as type t with ggml's reference quantizer (no
// importance matrix), as llama-quantize does without --imatrix.
func Quantize(t Type, src []float32, dst []byte) error {
	return quantize(t, src, dst, false)
}

func quantize(t Type, src []float32, dst []byte, x86 bool) error {
	if !CanQuantize(t) {
		return fmt.Errorf("quant: cannot quantize to %s", t)
	}
	if err := checkRow(t, len(src), dst, "Quantize"); err != nil {
		return err
	}
	switch t {
	case F32:
		for i, v := range src {
			put32(dst, 4*i, math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			put16(dst, 2*i, F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			put16(dst, 2*i, F32ToBF16(v))
		}
	case Q4_0:
		quantQ4_0(src, dst)
	case Q4_1:
		quantQ4_1(src, dst)
	case Q5_0:
		quantQ5_0(src, dst)
	case Q5_1:
		quantQ5_1(src, dst)
	case Q8_0:
		quantQ8_0(src, dst, x86)
	case Q8_1:
		quantQ8_1(src, dst, x86)
	case Q8_K:
		quantQ8_K(src, dst)
	case Q2_K:
		quantQ2_K(src, dst)
	case Q3_K:
		quantQ3_K(src, dst)
	case Q4_K:
		quantQ4_K(src, dst)
	case Q5_K:
		quantQ5_K(src, dst)
	case Q6_K:
		quantQ6_K(src, dst)
	case TQ1_0:
		quantTQ1_0(src, dst)
	case TQ2_0:
		quantTQ2_0(src, dst)
	case MXFP4:
		quantMXFP4(src, dst)
	}
	return nil
}
