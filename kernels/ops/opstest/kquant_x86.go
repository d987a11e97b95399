package opstest

import (
	"encoding/binary"
	"math"

	"github.com/jitllm/jitllm/kernels/quant"
)

// Hand-written references of ggml's AVX2 k-quant dot products
// (arch/x86/quants.c under __AVX2__), written from the intrinsics' meaning
// independently of kernels/ops' IR, so the Orders there are checked against
// something they do not share.

// fma32 is a float32 fused multiply-add rounded once, as VFMADD231PS
// rounds it. float32(math.FMA(...)) rounds twice, to float64 and then to
// float32, and goes wrong when the first rounding lands exactly on a
// float32 midpoint (an addend 2^29 times smaller than the product, say):
// here the exact residue of the float64 sum breaks such ties.
func fma32(a, b, c float32) float32 {
	p, z := float64(float64(a)*float64(b)), float64(c) // p is exact: 48 bits
	s := p + z
	r := float32(s)
	if math.IsInf(s, 0) || s != s || float64(r) == s {
		return r
	}
	bp := s - p
	e := (p - (s - bp)) + (z - bp) // TwoSum: p + z == s + e exactly
	other := math.Nextafter32(r, float32(math.Inf(1)))
	if float64(r) > s {
		other = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if e == 0 || (float64(r)+float64(other))/2 != s {
		return r // not a tie: the first rounding kept the side
	}
	if (e > 0) == (other > r) {
		return other
	}
	return r
}

func f16(b []byte, o int) float32 { return quant.F16ToF32(binary.LittleEndian.Uint16(b[o:])) }

func f32(b []byte, o int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[o:])) }

// hsum8 is hsum_float_8: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
func hsum8(v *[8]float32) float32 {
	var r [4]float32
	for i := range r {
		r[i] = v[i+4] + v[i]
	}
	return (r[0] + r[2]) + (r[1] + r[3])
}

// maddubs32 is one int32 lane of _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q, y))
// over bytes 4t..4t+3 of a 32-byte chunk, one scale for the chunk's half
// (every sum fits its int16 step for k-quant operands).
func maddubs32(q []int32, y []byte, sc func(b int) int32, t int) int32 {
	var s int32
	for p := 0; p < 2; p++ {
		b := 4*t + 2*p
		s += sc(b) * (q[b]*int32(int8(y[b])) + q[b+1]*int32(int8(y[b+1])))
	}
	return s
}

// DotQ4_KAVX2 is ggml_vec_dot_q4_K_q8_K as its AVX2 path computes it.
func DotQ4_KAVX2(n int, w, x []byte) float32 {
	var acc [8]float32
	var accm [4]float32
	var q [32]int32
	for i := 0; i < n/256; i++ {
		b, y := w[i*144:(i+1)*144], x[i*292:(i+1)*292]
		yd := f32(y, 0)
		d, dmin := yd*f16(b, 0), -yd*f16(b, 2)
		sc, mn := k4Scales(b[4:16])
		bs := func(g int) int32 { return int32(int16(binary.LittleEndian.Uint16(y[260+2*g:]))) }
		for u := 0; u < 4; u++ {
			p := mn[2*u]*(bs(4*u)+bs(4*u+1)) + mn[2*u+1]*(bs(4*u+2)+bs(4*u+3))
			accm[u] = fma32(dmin, float32(p), accm[u])
		}
		var lane [8]int32
		for j := 0; j < 4; j++ {
			for h := 0; h < 2; h++ {
				for c := range q {
					q[c] = int32(b[16+32*j+c]>>(4*h)) & 0xf
				}
				s := sc[2*j+h]
				for t := range lane {
					lane[t] += maddubs32(q[:], y[4+64*j+32*h:], func(int) int32 { return s }, t)
				}
			}
		}
		for t := range acc {
			acc[t] = fma32(d, float32(lane[t]), acc[t])
		}
	}
	return hsum8(&acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]))
}

// k4Scales is get_scale_min_k4 for the 8 sub-blocks of Q4_K and Q5_K.
func k4Scales(s []byte) (sc, mn [8]int32) {
	for j := 0; j < 8; j++ {
		if j < 4 {
			sc[j], mn[j] = int32(s[j]&63), int32(s[j+4]&63)
		} else {
			sc[j] = int32(s[j+4]&0xf | (s[j-4]>>6)<<4)
			mn[j] = int32(s[j+4]>>4 | (s[j]>>6)<<4)
		}
	}
	return sc, mn
}

// DotQ5_KAVX2 is ggml_vec_dot_q5_K_q8_K as its AVX2 path computes it: the
// mins as one integer per block into a scalar summs (an FMA, as GCC
// contracts summs += dmin*x), added after hsum_float_8.
func DotQ5_KAVX2(n int, w, x []byte) float32 {
	var acc [8]float32
	var summs float32
	var q [32]int32
	for i := 0; i < n/256; i++ {
		b, y := w[i*176:(i+1)*176], x[i*292:(i+1)*292]
		yd := f32(y, 0)
		d, dmin := yd*f16(b, 0), -yd*f16(b, 2)
		sc, mn := k4Scales(b[4:16])
		var m int32
		for g := 0; g < 16; g++ {
			m += mn[g/2] * int32(int16(binary.LittleEndian.Uint16(y[260+2*g:])))
		}
		summs = fma32(dmin, float32(m), summs)
		var lane [8]int32
		for j := 0; j < 4; j++ {
			for h := 0; h < 2; h++ {
				bit := uint(2*j + h)
				for c := range q {
					q[c] = int32(b[48+32*j+c]>>(4*h))&0xf | int32(b[16+c]>>bit&1)<<4
				}
				s := sc[2*j+h]
				for t := range lane {
					lane[t] += maddubs32(q[:], y[4+64*j+32*h:], func(int) int32 { return s }, t)
				}
			}
		}
		for t := range acc {
			acc[t] = fma32(d, float32(lane[t]), acc[t])
		}
	}
	return hsum8(&acc) + summs
}

// DotQ6_KAVX2 is ggml_vec_dot_q6_K_q8_K as its AVX2 path computes it.
func DotQ6_KAVX2(n int, w, x []byte) float32 {
	var acc [8]float32
	var q [32]int32
	for i := 0; i < n/256; i++ {
		b, y := w[i*210:(i+1)*210], x[i*292:(i+1)*292]
		d := f32(y, 0) * f16(b, 208)
		var lane [8]int32
		for half := 0; half < 2; half++ {
			ql, qh := b[64*half:], b[128+32*half:]
			for k := 0; k < 4; k++ { // 32 values 128half+32k: q4_k in ggml's loop
				for c := range q {
					q[c] = int32(ql[32*(k%2)+c]>>(4*(k/2))&0xf|(qh[c]>>(2*k)&3)<<4) - 32
				}
				is := 8*half + 2*k
				sc := func(b int) int32 { return int32(int8(w[i*210+192+is+b/16])) }
				for t := range lane {
					lane[t] += maddubs32(q[:], y[4+128*half+32*k:], sc, t)
				}
			}
		}
		for t := range acc {
			acc[t] = fma32(d, float32(lane[t]), acc[t])
		}
	}
	return hsum8(&acc)
}

// DotQ4_KRepack8x8 is one output of ggml_gemv_q4_K_8x8_q8_K on x86: per
// block the whole integer sum and the whole mins sum, each accumulated with
// one FMA (by d·y.d and dmin·y.d), subtracted at the end.
func DotQ4_KRepack8x8(n int, w, x []byte) float32 {
	var acc, accm float32
	for i := 0; i < n/256; i++ {
		b, y := w[i*144:(i+1)*144], x[i*292:(i+1)*292]
		yd := f32(y, 0)
		sc, mn := k4Scales(b[4:16])
		var s, m int32
		for j := 0; j < 8; j++ {
			for l := 0; l < 32; l++ {
				q := int32(b[16+32*(j/2)+l]>>(4*(j%2))) & 0xf
				s += sc[j] * q * int32(int8(y[4+32*j+l]))
			}
		}
		for g := 0; g < 16; g++ {
			m += mn[g/2] * int32(int16(binary.LittleEndian.Uint16(y[260+2*g:])))
		}
		acc = fma32(float32(s), f16(b, 0)*yd, acc)
		accm = fma32(float32(m), f16(b, 2)*yd, accm)
	}
	return acc - accm
}
