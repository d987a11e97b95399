package quant

import (
	"math"
)

// This file reproduces, bit for bit where it matters, the order in which
// ggml's x86 AVX512 CPU build (GGML_NATIVE on an AVX512 machine) accumulates
// its float dot products, and its vectorized expf/SiLU. The generic kernels
// in float.go follow ggml's scalar C code instead. The order decides the last
// bit of each result, and through the f16 KV cache and the 8-bit activation
// rounding of quantized matmuls those bits decide discrete roundings.

// fma32 is a float32 fused multiply-add a*b + c, rounded once.
func fma32(a, b, c float32) float32 { return FMA32(a, b, c) }

// reduce512 is GCC's _mm512_reduce_add_ps: halves added pairwise, 256, 128,
// then the 4-lane tree (0+2, 1+3, then the two).
func reduce512(v *[16]float32) float32 {
	var t8 [8]float32
	for i := range t8 {
		t8[i] = v[i+8] + v[i]
	}
	var t4 [4]float32
	for i := range t4 {
		t4[i] = t8[i+4] + t8[i]
	}
	a := t4[0] + t4[2]
	b := t4[1] + t4[3]
	return a + b
}

// hsum8 is ggml's hsum_float_8 (AVX2): 128-bit halves added, then
// movehl and movehdup: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
func hsum8(v *[8]float32) float32 {
	var r [4]float32
	for i := range r {
		r[i] = v[i+4] + v[i]
	}
	a := r[0] + r[2]
	b := r[1] + r[3]
	return a + b
}

// DotF32AVX512 is ggml_vec_dot_f32 as the AVX512 build computes it: four
// 16-lane FMA accumulators over steps of 64, reduced (0+2, 1+3, then
// together, then _mm512_reduce_add_ps) into a float, and the elements past
// the last full step added one at a time in float (fused, as GCC contracts
// sumf += x*y).
func DotF32AVX512(n int, w, x []byte) float32 {
	np := n &^ 63
	var acc [4][16]float32
	for i := 0; i < np; i += 64 {
		for j := 0; j < 4; j++ {
			for l := 0; l < 16; l++ {
				o := 4 * (i + 16*j + l)
				a := math.Float32frombits(le32(w, o))
				b := math.Float32frombits(le32(x, o))
				acc[j][l] = fma32(a, b, acc[j][l])
			}
		}
	}
	var sum float32
	if np > 0 {
		for l := 0; l < 16; l++ {
			acc[0][l] += acc[2][l]
			acc[1][l] += acc[3][l]
		}
		for l := 0; l < 16; l++ {
			acc[0][l] += acc[1][l]
		}
		sum = reduce512(&acc[0])
	}
	for i := np; i < n; i++ {
		a := math.Float32frombits(le32(w, 4*i))
		b := math.Float32frombits(le32(x, 4*i))
		sum = fma32(a, b, sum)
	}
	return sum
}

// DotF32TinyBLAS is one element of llamafile's tinyBLAS<16, __m512> F32 GEMM
// (ggml's path for F32 weights with at least 2 activation rows, n%16 == 0):
// one 16-lane FMA accumulator over the row, then _mm512_reduce_add_ps.
func DotF32TinyBLAS(n int, w, x []byte) float32 {
	var acc [16]float32
	for i := 0; i < n; i += 16 {
		for l := 0; l < 16; l++ {
			o := 4 * (i + l)
			acc[l] = fma32(math.Float32frombits(le32(w, o)), math.Float32frombits(le32(x, o)), acc[l])
		}
	}
	return reduce512(&acc)
}

// DotF16AVX512 is ggml_vec_dot_f16 as the AVX512 build computes it (the
// same four-accumulator scheme as DotF32AVX512 over values widened from
// f16), with the leftovers added in double, as in ggml.
func DotF16AVX512(n int, w, x []byte) float32 {
	np := n &^ 63
	var acc [4][16]float32
	for i := 0; i < np; i += 64 {
		for j := 0; j < 4; j++ {
			for l := 0; l < 16; l++ {
				o := 2 * (i + 16*j + l)
				acc[j][l] = fma32(fp16(w, o), fp16(x, o), acc[j][l])
			}
		}
	}
	var sum float64
	if np > 0 {
		for l := 0; l < 16; l++ {
			acc[0][l] += acc[2][l]
			acc[1][l] += acc[3][l]
		}
		for l := 0; l < 16; l++ {
			acc[0][l] += acc[1][l]
		}
		sum = float64(reduce512(&acc[0]))
	}
	for i := np; i < n; i++ {
		sum += float64(fp16(w, 2*i) * fp16(x, 2*i))
	}
	return float32(sum)
}

// DotF16AVX512Values is DotF16AVX512 over a query already widened from f16
// (q) and a key row of f16 bits (k), for the flash-attention K·Q product.
func DotF16AVX512Values(q []float32, k []uint16) float32 {
	n := len(q)
	np := n &^ 63
	var acc [4][16]float32
	for i := 0; i < np; i += 64 {
		for j := 0; j < 4; j++ {
			for l := 0; l < 16; l++ {
				o := i + 16*j + l
				acc[j][l] = fma32(q[o], f16Table[k[o]], acc[j][l])
			}
		}
	}
	var sum float64
	if np > 0 {
		for l := 0; l < 16; l++ {
			acc[0][l] += acc[2][l]
			acc[1][l] += acc[3][l]
		}
		for l := 0; l < 16; l++ {
			acc[0][l] += acc[1][l]
		}
		sum = float64(reduce512(&acc[0]))
	}
	for i := np; i < n; i++ {
		sum += float64(q[i] * f16Table[k[i]])
	}
	return float32(sum)
}

// DotF16TinyBLAS is one element of tinyBLAS<16, __m512> over f16 operands.
func DotF16TinyBLAS(n int, w, x []byte) float32 {
	var acc [16]float32
	for i := 0; i < n; i += 16 {
		for l := 0; l < 16; l++ {
			o := 2 * (i + l)
			acc[l] = fma32(fp16(w, o), fp16(x, o), acc[l])
		}
	}
	return reduce512(&acc)
}

// ExpfAVX512 is one lane of ggml's ggml_v_expf for AVX512 (vec.h, "adapted
// from arm limited optimized routine"), which the AVX512 build uses for SiLU
// and SwiGLU 16 values at a time.
func ExpfAVX512(x float32) float32 {
	const r = float32(0x1.8p23)
	z := fma32(x, 0x1.715476p+0, r)
	n := z - r
	b := fma32(-n, 0x1.7f7d1cp-20, fma32(-n, 0x1.62e4p-1, x))
	u := b * b
	j := fma32(
		fma32(fma32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fma32(0x1.555e66p-3, b, 0x1.fffdb6p-2)),
		u,
		fma32(0x1.ffffecp-1, b, 1))
	if abs32(n) > 192 {
		if n <= 0 {
			return 0
		}
		return float32(math.Inf(1))
	}
	// _mm512_scalef_ps(j, n): j * 2^floor(n), n integral here. The power of
	// two is built from bits rather than by math.Ldexp (slow on the hot
	// path): j·2^n is exact in float64 for |n| <= 192, so rounding it to
	// float32 once gives the same value.
	return float32(float64(j) * math.Float64frombits(uint64(int64(n)+1023)<<52))
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// SiLUAVX512 writes silu(x) = x/(1+exp(-x)) for one row as ggml's AVX512
// build does (ggml_vec_silu_f32 / ggml_vec_swiglu_f32): blocks of 16 with
// ggml_v_silu, the rest with the C library's expf.
func SiLUAVX512(x, y []float32) {
	n := len(x)
	np := n &^ 15
	for k := 0; k < np; k++ {
		v := x[k]
		y[k] = v / (1 + ExpfAVX512(0-v))
	}
	for k := np; k < n; k++ {
		v := x[k]
		y[k] = v / (1 + float32(math.Exp(float64(-v))))
	}
}

// DotQ8_0AVX2 is ggml_vec_dot_q8_0_q8_0 as the x86 AVX2/AVX512 build runs
// it (arch/x86/quants.c), which is also how llamafile's tinyBLAS_Q0_AVX
// accumulates each element for two rows or more: per block the integer sums
// of 4 consecutive products in 8 lanes, converted to float and accumulated
// with one FMA by the block's scale product dW*dX, then hsum_float_8.
func DotQ8_0AVX2(n int, w, x []byte) float32 {
	var acc [8]float32
	for i := 0; i < n/qk; i++ {
		a := w[i*34 : i*34+34 : i*34+34]
		y := x[i*34 : i*34+34 : i*34+34]
		d := fp16(a, 0) * fp16(y, 0)
		for l := 0; l < 8; l++ {
			var s int32
			for k := 2 + 4*l; k < 6+4*l; k++ {
				s += int32(int8(a[k])) * int32(int8(y[k]))
			}
			acc[l] = fma32(d, float32(s), acc[l])
		}
	}
	return hsum8(&acc)
}

// DotQ4_0AVX2 is ggml_vec_dot_q4_0_q8_0 (and tinyBLAS_Q0_AVX) on x86: the
// same lane scheme as DotQ8_0AVX2 over the nibbles minus 8.
func DotQ4_0AVX2(n int, w, x []byte) float32 {
	var acc [8]float32
	var q [32]int32
	for i := 0; i < n/qk; i++ {
		a := w[i*18 : i*18+18 : i*18+18]
		y := x[i*34 : i*34+34 : i*34+34]
		for j := 0; j < 16; j++ {
			q[j] = int32(a[2+j]&0xf) - 8
			q[j+16] = int32(a[2+j]>>4) - 8
		}
		d := fp16(a, 0) * fp16(y, 0)
		for l := 0; l < 8; l++ {
			var s int32
			for k := 4 * l; k < 4*l+4; k++ {
				s += q[k] * int32(int8(y[2+k]))
			}
			acc[l] = fma32(d, float32(s), acc[l])
		}
	}
	return hsum8(&acc)
}

// DotQ4_0Repack8x8 is one output of ggml's repacked Q4_0 kernels on x86
// (Q4_0 weights with a multiple of 8 rows go to the CPU_REPACK buffer as
// block_q4_0x8; arch/x86/repack.cpp ggml_gemv/gemm_q4_0_8x8_q8_0): each
// block's whole integer sum, converted to float, accumulated with one FMA by
// dW*dX.
func DotQ4_0Repack8x8(n int, w, x []byte) float32 {
	var acc float32
	for i := 0; i < n/qk; i++ {
		a := w[i*18 : i*18+18 : i*18+18]
		y := x[i*34 : i*34+34 : i*34+34]
		var s int32
		for j := 0; j < 16; j++ {
			s += (int32(a[2+j]&0xf) - 8) * int32(int8(y[2+j]))
			s += (int32(a[2+j]>>4) - 8) * int32(int8(y[18+j]))
		}
		acc = fma32(float32(s), fp16(a, 0)*fp16(y, 0), acc)
	}
	return acc
}
