package quant

import "math"

// Non-linear 4-bit formats: a 16-entry codebook indexed by nibbles.
//
//	IQ4_NL (18):  d f16, qs[16]                        value = d*kvaluesIQ4NL[nibble]
//	IQ4_XS (136): d f16, scales_h u16, scales_l[4], qs[128]; 8 sub-blocks of 32 with
//	              6-bit scale ls (low 4 bits in scales_l, high 2 in scales_h), value = d*(ls-32)*kvalue
//	MXFP4 (17):   e (E8M0 exponent), qs[16]             value = 2^(e-128)*kvaluesMXFP4[nibble]
//
// As in the legacy formats, low nibbles are values 0..15 of a 32-value block,
// high nibbles 16..31.

var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// kvaluesMXFP4 are the E2M1 values doubled (hence e8m0Half).
var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

const iq4xsBytes = 136

func dequantIQ4_NL(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*18 : i*18+18 : i*18+18]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d := fp16(b, 0)
		for j := 0; j < 16; j++ {
			y[j] = d * float32(kvaluesIQ4NL[b[2+j]&0xf])
			y[j+16] = d * float32(kvaluesIQ4NL[b[2+j]>>4])
		}
	}
}

func iq4xsScale(b []byte, ib int) int32 {
	lo := int32(b[4+ib/2]>>(4*(ib%2))) & 0xf
	hi := int32(le16(b, 2)>>(2*ib)) & 3
	return lo | hi<<4
}

func dequantIQ4_XS(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*iq4xsBytes : (i+1)*iq4xsBytes : (i+1)*iq4xsBytes]
		d := fp16(b, 0)
		for ib := 0; ib < 8; ib++ {
			dl := d * float32(iq4xsScale(b, ib)-32)
			q := b[8+16*ib : 24+16*ib : 24+16*ib]
			y := dst[i*QK_K+32*ib : i*QK_K+32*ib+32 : i*QK_K+32*ib+32]
			for j := 0; j < 16; j++ {
				y[j] = dl * float32(kvaluesIQ4NL[q[j]&0xf])
				y[j+16] = dl * float32(kvaluesIQ4NL[q[j]>>4])
			}
		}
	}
}

func dequantMXFP4(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*17 : i*17+17 : i*17+17]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d := e8m0Half(b[0])
		for j := 0; j < 16; j++ {
			y[j] = float32(kvaluesMXFP4[b[1+j]&0xf]) * d
			y[j+16] = float32(kvaluesMXFP4[b[1+j]>>4]) * d
		}
	}
}

// quantMXFP4 is quantize_row_mxfp4_ref: a power-of-two scale from the block
// maximum, then the nearest codebook entry (first on ties).
func quantMXFP4(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		b := dst[i*17 : i*17+17 : i*17+17]
		amax := amaxOf(x)
		var e uint8
		if amax > 0 {
			// floorf(log2f(amax)) - 2 + 127, with log2f's float32 rounding
			// (it can round up to the next integer just below a power of 2)
			l2 := float32(math.Log2(float64(amax)))
			e = uint8(int(math.Floor(float64(l2))) - 2 + 127)
		}
		d := e8m0Half(e)
		b[0] = e
		for j := 0; j < 16; j++ {
			b[1+j] = bestMXFP4(x[j], d) | bestMXFP4(x[j+16], d)<<4
		}
	}
}

func bestMXFP4(x, e float32) byte {
	best := 0
	bestErr := float32(math.Abs(float64(float32(float32(kvaluesMXFP4[0])*e) - x)))
	for i := 1; i < 16; i++ {
		if err := float32(math.Abs(float64(float32(float32(kvaluesMXFP4[i])*e) - x))); err < bestErr {
			best, bestErr = i, err
		}
	}
	return byte(best)
}

func dotIQ4_NL(n int, w, x []byte) float32 {
	var sumf float32
	for i := 0; i < n/qk; i++ {
		a := w[i*18 : i*18+18 : i*18+18]
		y := x[i*34 : i*34+34 : i*34+34]
		d := fp16(y, 0) * fp16(a, 0)
		var s1, s2 int32
		for j := 0; j < 16; j++ {
			s1 += int32(int8(y[2+j])) * int32(kvaluesIQ4NL[a[2+j]&0xf])
			s2 += int32(int8(y[18+j])) * int32(kvaluesIQ4NL[a[2+j]>>4])
		}
		sumf += float32(d * float32(s1+s2))
	}
	return sumf
}

func dotMXFP4(n int, w, x []byte) float32 {
	var sumf float32
	for i := 0; i < n/qk; i++ {
		a := w[i*17 : i*17+17 : i*17+17]
		y := x[i*34 : i*34+34 : i*34+34]
		d := fp16(y, 0) * e8m0Half(a[0])
		var s1, s2 int32
		for j := 0; j < 16; j++ {
			s1 += int32(int8(y[2+j])) * int32(kvaluesMXFP4[a[1+j]&0xf])
			s2 += int32(int8(y[18+j])) * int32(kvaluesMXFP4[a[1+j]>>4])
		}
		sumf += float32(d * float32(s1+s2))
	}
	return sumf
}

func dotIQ4_XS(n int, w, x []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*iq4xsBytes : (i+1)*iq4xsBytes : (i+1)*iq4xsBytes]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		d4d8 := fp16(b, 0) * q8kD(y)
		for ib := 0; ib < 8; ib++ {
			dl := d4d8 * float32(iq4xsScale(b, ib)-32)
			q := b[8+16*ib : 24+16*ib : 24+16*ib]
			q8 := y[4+32*ib : 36+32*ib : 36+32*ib]
			var s1, s2 int32
			for j := 0; j < 16; j++ {
				s1 += int32(int8(q8[j])) * int32(kvaluesIQ4NL[q[j]&0xf])
				s2 += int32(int8(q8[j+16])) * int32(kvaluesIQ4NL[q[j]>>4])
			}
			sumf += float32(dl * float32(s1+s2))
		}
	}
	return sumf
}
