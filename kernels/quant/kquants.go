package quant

import "math"

// The k-quants: 256-value super-blocks with per-16 or per-32 sub-block
// scales. Layouts (little-endian, ggml-common.h):
//
//	Q2_K (84):  scales[16] (lo nibble scale, hi nibble min), qs[64] (2 bits), d f16, dmin f16
//	Q3_K (110): hmask[32] (high bit), qs[64] (low 2 bits), scales[12] (16 x 6 bits), d f16
//	Q4_K (144): d f16, dmin f16, scales[12] (8 x 6-bit scale + 8 x 6-bit min), qs[128]
//	Q5_K (176): d f16, dmin f16, scales[12], qh[32] (fifth bit), qs[128]
//	Q6_K (210): ql[128] (low 4 bits), qh[64] (high 2 bits), scales int8[16], d f16
//	Q8_K (292): d f32, qs int8[256], bsums int16[16] (sums of 16 qs)
//
// The dot kernels follow ggml's *_q8_K_generic: integer products are gathered
// into 8 lanes (lane = index mod 8), each lane is scaled into its own float32
// accumulator per super-block, and the lanes are summed at the end.

const (
	q2kBytes = 84
	q3kBytes = 110
	q4kBytes = 144
	q5kBytes = 176
	q6kBytes = 210
	q8kBytes = 292
)

// nearestInt is ggml's nearest_int: round half to even through the float32
// adder (valid for |f| <= 2^22).
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// scaleMinK4 is get_scale_min_k4: sub-block j's 6-bit scale and min of Q4_K/Q5_K.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// q3kScales unpacks Q3_K's twelve scale bytes into 16 signed scales (-32..31)
// with the same word-wise shuffle ggml uses.
func q3kScales(s []byte, out *[16]int32) {
	const kmask1, kmask2 = 0x03030303, 0x0f0f0f0f
	a0, a1, tmp := le32(s, 0), le32(s, 4), le32(s, 8)
	w := [4]uint32{
		a0&kmask2 | (tmp>>0&kmask1)<<4,
		a1&kmask2 | (tmp>>2&kmask1)<<4,
		a0>>4&kmask2 | (tmp>>4&kmask1)<<4,
		a1>>4&kmask2 | (tmp>>6&kmask1)<<4,
	}
	for i := 0; i < 16; i++ {
		out[i] = int32(int8(byte(w[i/4]>>(8*(i%4))))) - 32
	}
}

// q4kScales unpacks Q4_K/Q5_K's twelve scale bytes into 8 scales and 8 mins.
func q4kScales(s []byte) (sc, mn [8]uint8) {
	const kmask1, kmask2, kmask3 = 0x3f3f3f3f, 0x0f0f0f0f, 0x03030303
	u0, u1, u2 := le32(s, 0), le32(s, 4), le32(s, 8)
	u3 := u2>>4&kmask2 | (u1>>6&kmask3)<<4
	m0 := u1 & kmask1
	s1 := u2&kmask2 | (u0>>6&kmask3)<<4
	s0 := u0 & kmask1
	for i := 0; i < 4; i++ {
		sc[i], sc[i+4] = byte(s0>>(8*i)), byte(s1>>(8*i))
		mn[i], mn[i+4] = byte(m0>>(8*i)), byte(u3>>(8*i))
	}
	return sc, mn
}

// --- dequantize

func dequantQ2_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*q2kBytes : (i+1)*q2kBytes : (i+1)*q2kBytes]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d, dmin := fp16(b, 80), fp16(b, 82)
		is, o := 0, 0
		for n := 0; n < 2; n++ {
			q := b[16+32*n : 48+32*n : 48+32*n]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					sc := b[is]
					is++
					dl, ml := d*float32(sc&0xf), float32(dmin*float32(sc>>4))
					for l := 16 * half; l < 16*half+16; l++ {
						y[o] = float32(dl*float32(q[l]>>shift&3)) - ml
						o++
					}
				}
			}
		}
	}
}

func dequantQ3_K(src []byte, dst []float32) {
	var sc [16]int32
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*q3kBytes : (i+1)*q3kBytes : (i+1)*q3kBytes]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d := fp16(b, 108)
		q3kScales(b[96:108], &sc)
		hm := b[0:32:32]
		m := byte(1)
		is, o := 0, 0
		for n := 0; n < 2; n++ {
			q := b[32+32*n : 64+32*n : 64+32*n]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					dl := d * float32(sc[is])
					is++
					for l := 16 * half; l < 16*half+16; l++ {
						v := int32(q[l] >> shift & 3)
						if hm[l]&m == 0 {
							v -= 4
						}
						y[o] = dl * float32(v)
						o++
					}
				}
				m <<= 1
			}
		}
	}
}

func dequantQ4_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*q4kBytes : (i+1)*q4kBytes : (i+1)*q4kBytes]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d, dmin := fp16(b, 0), fp16(b, 2)
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, b[4:16])
			s2, m2 := scaleMinK4(2*j+1, b[4:16])
			d1, mm1 := d*float32(s1), float32(dmin*float32(m1))
			d2, mm2 := d*float32(s2), float32(dmin*float32(m2))
			q := b[16+32*j : 48+32*j : 48+32*j]
			o := y[64*j : 64*j+64 : 64*j+64]
			for l := 0; l < 32; l++ {
				o[l] = float32(d1*float32(q[l]&0xf)) - mm1
				o[l+32] = float32(d2*float32(q[l]>>4)) - mm2
			}
		}
	}
}

func dequantQ5_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*q5kBytes : (i+1)*q5kBytes : (i+1)*q5kBytes]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d, dmin := fp16(b, 0), fp16(b, 2)
		qh := b[16:48:48]
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, b[4:16])
			s2, m2 := scaleMinK4(2*j+1, b[4:16])
			d1, mm1 := d*float32(s1), float32(dmin*float32(m1))
			d2, mm2 := d*float32(s2), float32(dmin*float32(m2))
			u1, u2 := byte(1)<<(2*j), byte(2)<<(2*j)
			q := b[48+32*j : 80+32*j : 80+32*j]
			o := y[64*j : 64*j+64 : 64*j+64]
			for l := 0; l < 32; l++ {
				lo, hi := q[l]&0xf, q[l]>>4
				if qh[l]&u1 != 0 {
					lo += 16
				}
				if qh[l]&u2 != 0 {
					hi += 16
				}
				o[l] = float32(d1*float32(lo)) - mm1
				o[l+32] = float32(d2*float32(hi)) - mm2
			}
		}
	}
}

// q6kUnpack decodes a Q6_K block's 256 quants to -32..31.
func q6kUnpack(b []byte, a *[QK_K]int8) {
	for n := 0; n < 2; n++ {
		ql := b[64*n : 64*n+64 : 64*n+64]
		qh := b[128+32*n : 160+32*n : 160+32*n]
		o := a[128*n : 128*n+128 : 128*n+128]
		for l := 0; l < 32; l++ {
			h := qh[l]
			o[l] = int8(ql[l]&0xf|(h&3)<<4) - 32
			o[l+32] = int8(ql[l+32]&0xf|(h>>2&3)<<4) - 32
			o[l+64] = int8(ql[l]>>4|(h>>4&3)<<4) - 32
			o[l+96] = int8(ql[l+32]>>4|(h>>6&3)<<4) - 32
		}
	}
}

func dequantQ6_K(src []byte, dst []float32) {
	var a [QK_K]int8
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*q6kBytes : (i+1)*q6kBytes : (i+1)*q6kBytes]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d := fp16(b, 208)
		q6kUnpack(b, &a)
		for j := range y {
			// ggml: d * sc * q, evaluated left to right in float
			y[j] = float32(d*float32(int8(b[192+j/16]))) * float32(a[j])
		}
	}
}

func dequantQ8_K(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d := math.Float32frombits(le32(b, 0))
		for j := range y {
			y[j] = d * float32(int8(b[4+j]))
		}
	}
}

// quantQ8_K is quantize_row_q8_K_ref (also what x86 builds use). ggml leaves
// bsums unwritten for an all-zero block; here they are zeroed.
func quantQ8_K(src []float32, dst []byte) {
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		var max, amax float32
		for _, v := range x {
			if ax := absf(v); ax > amax {
				amax, max = ax, v
			}
		}
		if amax == 0 {
			clear(b)
			continue
		}
		// -127 (not -128) so the SIMD kernels never see -128
		iscale := -127 / max
		q := b[4:260:260]
		for j, v := range x {
			q[j] = byte(int8(min(127, nearestInt(float32(iscale*v)))))
		}
		for j := 0; j < 16; j++ {
			var s int32
			for _, v := range q[16*j : 16*j+16] {
				s += int32(int8(v))
			}
			put16(b, 260+2*j, uint16(int16(s)))
		}
		put32(b, 0, math.Float32bits(1/iscale))
	}
}

// --- dot products

// lanes8 accumulates sc[g]*a[p]*q8[p] over a super-block into 8 lanes by p
// mod 8, g = p/16, exactly the integers ggml's aux32[8] holds.
func lanes8(a *[QK_K]int8, q8 []byte, sc *[16]int32) (l [8]int32) {
	q8 = q8[:QK_K:QK_K]
	for c := 0; c < 32; c++ {
		s := sc[c>>1]
		qa := a[8*c : 8*c+8 : 8*c+8]
		qy := q8[8*c : 8*c+8 : 8*c+8]
		l[0] += s * (int32(qa[0]) * int32(int8(qy[0])))
		l[1] += s * (int32(qa[1]) * int32(int8(qy[1])))
		l[2] += s * (int32(qa[2]) * int32(int8(qy[2])))
		l[3] += s * (int32(qa[3]) * int32(int8(qy[3])))
		l[4] += s * (int32(qa[4]) * int32(int8(qy[4])))
		l[5] += s * (int32(qa[5]) * int32(int8(qy[5])))
		l[6] += s * (int32(qa[6]) * int32(int8(qy[6])))
		l[7] += s * (int32(qa[7]) * int32(int8(qy[7])))
	}
	return l
}

func addLanes(sums *[8]float32, d float32, l *[8]int32) {
	for k := range sums {
		sums[k] += float32(d * float32(l[k]))
	}
}

func q8kD(y []byte) float32 { return math.Float32frombits(le32(y, 0)) }

func dotQ2_K(n int, w, x []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*q2kBytes : (i+1)*q2kBytes : (i+1)*q2kBytes]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		sc := b[0:16:16]
		var summs int32
		for j := 0; j < 16; j++ {
			summs += int32(int16(le16(y, 260+2*j))) * int32(sc[j]>>4)
		}
		yd := q8kD(y)
		dall, dmin := yd*fp16(b, 80), yd*fp16(b, 82)
		var isum int32
		is := 0
		q8 := y[4:260:260]
		for k := 0; k < 2; k++ {
			q2 := b[16+32*k : 48+32*k : 48+32*k]
			for shift := uint(0); shift < 8; shift += 2 {
				qy := q8[:32:32]
				var s0, s1 int32
				for l := 0; l < 16; l++ {
					s0 += int32(int8(qy[l])) * int32(q2[l]>>shift&3)
					s1 += int32(int8(qy[l+16])) * int32(q2[l+16]>>shift&3)
				}
				isum += int32(sc[is]&0xf)*s0 + int32(sc[is+1]&0xf)*s1
				is += 2
				q8 = q8[32:]
			}
		}
		sumf += float32(dall*float32(isum)) - float32(dmin*float32(summs))
	}
	return sumf
}

func dotQ3_K(n int, w, x []byte) float32 {
	var a [QK_K]int8
	var sc [16]int32
	var sums [8]float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*q3kBytes : (i+1)*q3kBytes : (i+1)*q3kBytes]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		hm := b[0:32:32]
		m := byte(1)
		for n := 0; n < 2; n++ {
			q := b[32+32*n : 64+32*n : 64+32*n]
			for g := 0; g < 4; g++ {
				o := a[128*n+32*g : 128*n+32*g+32 : 128*n+32*g+32]
				shift := uint(2 * g)
				for l := 0; l < 32; l++ {
					v := int8(q[l] >> shift & 3)
					if hm[l]&m == 0 {
						v -= 4
					}
					o[l] = v
				}
				m <<= 1
			}
		}
		q3kScales(b[96:108], &sc)
		l := lanes8(&a, y[4:260], &sc)
		addLanes(&sums, fp16(b, 108)*q8kD(y), &l)
	}
	var sumf float32
	for _, s := range sums {
		sumf += s
	}
	return sumf
}

// bsumMins is sum_j bsums[j]*mins[j/2] of the Q4_K/Q5_K kernels.
func bsumMins(y []byte, mn *[8]uint8) int32 {
	var s int32
	for j := 0; j < 16; j++ {
		s += int32(int16(le16(y, 260+2*j))) * int32(mn[j/2])
	}
	return s
}

func dotQ4_K(n int, w, x []byte) float32 {
	var sums [8]float32
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*q4kBytes : (i+1)*q4kBytes : (i+1)*q4kBytes]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		sc, mn := q4kScales(b[4:16])
		q8 := y[4:260:260]
		// value 64j+l is the low nibble of qs[32j+l], value 64j+32+l the high
		// one; both fall in lane l mod 8, so they share an accumulator
		var l [8]int32
		for j := 0; j < 4; j++ {
			s1, s2 := int32(sc[2*j]), int32(sc[2*j+1])
			for c := 0; c < 4; c++ {
				q := b[16+32*j+8*c : 24+32*j+8*c : 24+32*j+8*c]
				ya := q8[64*j+8*c : 64*j+8*c+8 : 64*j+8*c+8]
				yb := q8[64*j+32+8*c : 64*j+40+8*c : 64*j+40+8*c]
				l[0] += s1*(int32(q[0]&0xf)*int32(int8(ya[0]))) + s2*(int32(q[0]>>4)*int32(int8(yb[0])))
				l[1] += s1*(int32(q[1]&0xf)*int32(int8(ya[1]))) + s2*(int32(q[1]>>4)*int32(int8(yb[1])))
				l[2] += s1*(int32(q[2]&0xf)*int32(int8(ya[2]))) + s2*(int32(q[2]>>4)*int32(int8(yb[2])))
				l[3] += s1*(int32(q[3]&0xf)*int32(int8(ya[3]))) + s2*(int32(q[3]>>4)*int32(int8(yb[3])))
				l[4] += s1*(int32(q[4]&0xf)*int32(int8(ya[4]))) + s2*(int32(q[4]>>4)*int32(int8(yb[4])))
				l[5] += s1*(int32(q[5]&0xf)*int32(int8(ya[5]))) + s2*(int32(q[5]>>4)*int32(int8(yb[5])))
				l[6] += s1*(int32(q[6]&0xf)*int32(int8(ya[6]))) + s2*(int32(q[6]>>4)*int32(int8(yb[6])))
				l[7] += s1*(int32(q[7]&0xf)*int32(int8(ya[7]))) + s2*(int32(q[7]>>4)*int32(int8(yb[7])))
			}
		}
		sumi := bsumMins(y, &mn)
		yd := q8kD(y)
		addLanes(&sums, fp16(b, 0)*yd, &l)
		sumf -= float32(fp16(b, 2) * yd * float32(sumi))
	}
	for _, s := range sums {
		sumf += s
	}
	return sumf
}

func dotQ5_K(n int, w, x []byte) float32 {
	var a [QK_K]int8
	var sc16 [16]int32
	var sums [8]float32
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*q5kBytes : (i+1)*q5kBytes : (i+1)*q5kBytes]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		qh := b[16:48:48]
		for j := 0; j < 4; j++ {
			q := b[48+32*j : 80+32*j : 80+32*j]
			o := a[64*j : 64*j+64 : 64*j+64]
			u1, u2 := byte(1)<<(2*j), byte(2)<<(2*j)
			for l := 0; l < 32; l++ {
				lo, hi := int8(q[l]&0xf), int8(q[l]>>4)
				if qh[l]&u1 != 0 {
					lo += 16
				}
				if qh[l]&u2 != 0 {
					hi += 16
				}
				o[l], o[l+32] = lo, hi
			}
		}
		sc, mn := q4kScales(b[4:16])
		for j := range sc16 {
			sc16[j] = int32(sc[j/2])
		}
		sumi := bsumMins(y, &mn)
		l := lanes8(&a, y[4:260], &sc16)
		yd := q8kD(y)
		addLanes(&sums, fp16(b, 0)*yd, &l)
		sumf -= float32(fp16(b, 2) * yd * float32(sumi))
	}
	for _, s := range sums {
		sumf += s
	}
	return sumf
}

func dotQ6_K(n int, w, x []byte) float32 {
	var a [QK_K]int8
	var sc [16]int32
	var sums [8]float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*q6kBytes : (i+1)*q6kBytes : (i+1)*q6kBytes]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		q6kUnpack(b, &a)
		for j := range sc {
			sc[j] = int32(int8(b[192+j]))
		}
		l := lanes8(&a, y[4:260], &sc)
		addLanes(&sums, fp16(b, 208)*q8kD(y), &l)
	}
	var sumf float32
	for _, s := range sums {
		sumf += s
	}
	return sumf
}
