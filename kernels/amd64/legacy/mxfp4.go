package legacy

import (
	"math"

	"github.com/jitllm/jitllm/kernels/quant"
)

// kvaluesMXFP4 are ggml's kvalues_mxfp4: the E2M1 values doubled (the block
// scale is halved to match, see e8m0Half).
var kvaluesMXFP4 = [16]int32{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half is GGML_E8M0_TO_FP32_HALF: 2^(e-128) as float32 bits.
func e8m0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// fma32 is a float32 fused multiply-add rounded once, as VFMADD does.
// float32(math.FMA(float64(a), float64(b), float64(c))) is not: it rounds
// twice, and when a·b lies on a float32 midpoint and c is below float64's
// precision there, the tie-break c decides is lost. So the float64 sum is
// rounded to odd (round-to-nearest, then the odd neighbour when inexact),
// which makes the final rounding to float32 exact.
func fma32(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b)) // exact: 48 bits
	cc := float64(c)
	r := p + cc
	if r-r != 0 { // Inf or NaN
		return float32(r)
	}
	v := r - p // TwoSum: err is the exact p + c - r
	err := (p - (r - v)) + (cc - v)
	if bits := math.Float64bits(r); err != 0 && bits&1 == 0 {
		if (err > 0) == (r > 0) {
			bits++ // the neighbour away from zero
		} else {
			bits--
		}
		r = math.Float64frombits(bits)
	}
	return float32(r)
}

// DotMXFP4AVX2 is ggml_vec_dot_mxfp4_q8_0 (MXFP4 weights, 17-byte blocks,
// against a Q8_0 row) as the x86 AVX2/AVX-512 build accumulates it
// (arch/x86/quants.c): blocks in pairs, the even one into accumulator 1 and
// the odd one into accumulator 2, each with one FMA per lane of the integer
// sum of 4 consecutive products by d = dY·2^(e-128); then
// hsum_float_8(acc1 + acc2); an odd last block is added as its whole
// integer sum, sumf = fma(d, sumi, sumf) (GCC contracts sumf += d*sumi).
// Its FMAs round once (fma32), as the hardware's.
// It is the reference of the native MXFP4 kernels; kernels/cpugen has no
// MXFP4 order yet. Products are exact (ggml's _mm256_sign_epi8 trick
// differs only for an activation byte of -128, which quant.QuantizeRowX86
// never writes).
func DotMXFP4AVX2(n int, w, x []byte) float32 {
	nb := n / 32
	var acc [2][8]float32
	val := func(a []byte, k int) int32 {
		if k < 16 {
			return kvaluesMXFP4[a[1+k]&0xf]
		}
		return kvaluesMXFP4[a[1+k-16]>>4]
	}
	ib := 0
	for ; ib+1 < nb; ib += 2 {
		for h := 0; h < 2; h++ {
			a := w[(ib+h)*17 : (ib+h)*17+17 : (ib+h)*17+17]
			y := x[(ib+h)*34 : (ib+h)*34+34 : (ib+h)*34+34]
			d := f16(y) * e8m0Half(a[0])
			for l := 0; l < 8; l++ {
				var s int32
				for k := 4 * l; k < 4*l+4; k++ {
					s += val(a, k) * int32(int8(y[2+k]))
				}
				acc[h][l] = fma32(d, float32(s), acc[h][l])
			}
		}
	}
	var v [8]float32
	for l := range v {
		v[l] = acc[0][l] + acc[1][l]
	}
	r := [4]float32{v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]}
	sum := (r[0] + r[2]) + (r[1] + r[3])
	for ; ib < nb; ib++ {
		a := w[ib*17 : ib*17+17 : ib*17+17]
		y := x[ib*34 : ib*34+34 : ib*34+34]
		var s int32
		for k := 0; k < 32; k++ {
			s += val(a, k) * int32(int8(y[2+k]))
		}
		sum = fma32(f16(y)*e8m0Half(a[0]), float32(s), sum)
	}
	return sum
}

func f16(b []byte) float32 { return quant.F16ToF32(uint16(b[0]) | uint16(b[1])<<8) }
