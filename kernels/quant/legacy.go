package quant

import "math"

// The "legacy" 32-value block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
// Layouts (little-endian, ggml-common.h):
//
//	Q4_0: d f16, qs[16]            value = (nibble-8)*d; low nibbles are values 0..15, high 16..31
//	Q4_1: d f16, m f16, qs[16]     value = nibble*d + m
//	Q5_0: d f16, qh u32, qs[16]    fifth bit j of value j in qh bit j; value = (q-16)*d
//	Q5_1: d f16, m f16, qh u32, qs[16]
//	Q8_0: d f16, qs int8[32]
//	Q8_1: d f16, s f16 (= d*sum(qs)), qs int8[32]
//
// Products feeding an addition are wrapped in float32() so that no compiler
// fuses them into an FMA: ggml's reference code rounds each step.

const qk = 32

func roundf(x float32) float32 { return float32(math.Round(float64(x))) }

func amaxOf(x []float32) float32 {
	var amax float32
	for _, v := range x {
		if a := absf(v); a > amax {
			amax = a
		}
	}
	return amax
}

// --- dequantize

func dequantQ4_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*18 : i*18+18 : i*18+18]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d := fp16(b, 0)
		for j := 0; j < 16; j++ {
			q := b[2+j]
			y[j] = float32(int(q&0xf)-8) * d
			y[j+16] = float32(int(q>>4)-8) * d
		}
	}
}

func dequantQ4_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*20 : i*20+20 : i*20+20]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d, m := fp16(b, 0), fp16(b, 2)
		for j := 0; j < 16; j++ {
			q := b[4+j]
			y[j] = float32(float32(q&0xf)*d) + m
			y[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

func dequantQ5_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*22 : i*22+22 : i*22+22]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d := fp16(b, 0)
		qh := le32(b, 2)
		for j := 0; j < 16; j++ {
			q := b[6+j]
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(int(q&0xf|h0)-16) * d
			y[j+16] = float32(int(q>>4|h1)-16) * d
		}
	}
}

func dequantQ5_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*24 : i*24+24 : i*24+24]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d, m := fp16(b, 0), fp16(b, 2)
		qh := le32(b, 4)
		for j := 0; j < 16; j++ {
			q := b[8+j]
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(float32(q&0xf|h0)*d) + m
			y[j+16] = float32(float32(q>>4|h1)*d) + m
		}
	}
}

func dequantQ8_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*34 : i*34+34 : i*34+34]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d := fp16(b, 0)
		for j := range y {
			y[j] = float32(int8(b[2+j])) * d
		}
	}
}

// dequantQ8_1 has no ggml counterpart (Q8_1 is only an activation format);
// it decodes qs*d and ignores s.
func dequantQ8_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk; i++ {
		b := src[i*36 : i*36+36 : i*36+36]
		y := dst[i*qk : i*qk+qk : i*qk+qk]
		d := fp16(b, 0)
		for j := range y {
			y[j] = float32(int8(b[4+j])) * d
		}
	}
}

// --- reference quantizers (ggml-quants.c quantize_row_*_ref)

// signedMax returns the value of largest magnitude (the first one on ties),
// which the _0 formats map to -8/-16 so the block uses the full range.
func signedMax(x []float32) float32 {
	var amax, max float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); amax < a {
			amax, max = a, v
		}
	}
	return max
}

func minMax(x []float32) (min, max float32) {
	min, max = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < min {
			min = v
		}
		if v > max {
			max = v
		}
	}
	return min, max
}

// inv is ggml's "d ? 1.0f/d : 0.0f".
func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

func quantQ4_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		b := dst[i*18 : i*18+18 : i*18+18]
		d := signedMax(x) / -8
		id := inv(d)
		put16(b, 0, F32ToF16(d))
		for j := 0; j < 16; j++ {
			// C truncates (int8_t)(x*id + 8.5f) toward zero
			q0 := min(15, int8(float32(x[j]*id)+8.5))
			q1 := min(15, int8(float32(x[j+16]*id)+8.5))
			b[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func quantQ4_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		b := dst[i*20 : i*20+20 : i*20+20]
		mn, mx := minMax(x)
		d := (mx - mn) / 15
		id := inv(d)
		put16(b, 0, F32ToF16(d))
		put16(b, 2, F32ToF16(mn))
		for j := 0; j < 16; j++ {
			q0 := min(15, int8(float32((x[j]-mn)*id)+0.5))
			q1 := min(15, int8(float32((x[j+16]-mn)*id)+0.5))
			b[4+j] = byte(q0) | byte(q1)<<4
		}
	}
}

func quantQ5_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		b := dst[i*22 : i*22+22 : i*22+22]
		d := signedMax(x) / -16
		id := inv(d)
		put16(b, 0, F32ToF16(d))
		var qh uint32
		for j := 0; j < 16; j++ {
			q0 := byte(min(31, int8(float32(x[j]*id)+16.5)))
			q1 := byte(min(31, int8(float32(x[j+16]*id)+16.5)))
			b[6+j] = q0&0xf | (q1&0xf)<<4
			qh |= uint32(q0&0x10) >> 4 << j
			qh |= uint32(q1&0x10) >> 4 << (j + 16)
		}
		put32(b, 2, qh)
	}
}

func quantQ5_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		b := dst[i*24 : i*24+24 : i*24+24]
		mn, mx := minMax(x)
		d := (mx - mn) / 31
		id := inv(d)
		put16(b, 0, F32ToF16(d))
		put16(b, 2, F32ToF16(mn))
		var qh uint32
		for j := 0; j < 16; j++ {
			q0 := byte(float32((x[j]-mn)*id) + 0.5)
			q1 := byte(float32((x[j+16]-mn)*id) + 0.5)
			b[8+j] = q0&0xf | (q1&0xf)<<4
			qh |= uint32(q0&0x10) >> 4 << j
			qh |= uint32(q1&0x10) >> 4 << (j + 16)
		}
		put32(b, 4, qh)
	}
}

// q8Scale returns the fp16-stored scale d = amax/127 and the multiplier used
// to quantize: the reference takes 1/d, the x86 SIMD build 127/amax.
func q8Scale(x []float32, x86 bool) (d, id float32) {
	amax := amaxOf(x)
	d = amax / 127
	if x86 {
		if amax != 0 {
			id = 127 / amax
		}
	} else {
		id = inv(d)
	}
	return d, id
}

// q8Round is roundf (half away from zero) for the reference, and the
// _MM_ROUND_NEAREST (half to even) of the x86 SIMD build.
func q8Round(v float32, x86 bool) int8 {
	if x86 {
		return int8(math.RoundToEven(float64(v)))
	}
	return int8(math.Round(float64(v)))
}

func quantQ8_0(src []float32, dst []byte, x86 bool) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		b := dst[i*34 : i*34+34 : i*34+34]
		d, id := q8Scale(x, x86)
		put16(b, 0, F32ToF16(d))
		for j, v := range x {
			b[2+j] = byte(q8Round(v*id, x86))
		}
	}
}

// QuantizeQ8_0Split is Quantize's Q8_0 in ggml's x86 rounding with the
// blocks split in two arrays: each block of 32 values of src as int8
// quants in qs (at the values' indices) and its scale, rounded through
// f16, in ds.
func QuantizeQ8_0Split(src []float32, qs []byte, ds []float32) {
	for i := range ds {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		d, id := q8Scale(x, true)
		ds[i] = F16ToF32(F32ToF16(d))
		for j, v := range x {
			qs[i*qk+j] = byte(q8Round(v*id, true))
		}
	}
}

func quantQ8_1(src []float32, dst []byte, x86 bool) {
	for i := 0; i < len(src)/qk; i++ {
		x := src[i*qk : i*qk+qk : i*qk+qk]
		b := dst[i*36 : i*36+36 : i*36+36]
		d, id := q8Scale(x, x86)
		put16(b, 0, F32ToF16(d))
		sum := 0
		for j, v := range x {
			q := q8Round(v*id, x86)
			b[4+j] = byte(q)
			sum += int(q)
		}
		// s = d * sum(qs), rounded through fp16 like the block's d
		put16(b, 2, F32ToF16(float32(sum)*d))
	}
}

// --- dot products (ggml-cpu quants.c ggml_vec_dot_*_generic)

func dotQ4_0(n int, w, x []byte) float32 {
	nb := n / qk
	var sumf float32
	for i := 0; i < nb; i++ {
		a := w[i*18 : i*18+18 : i*18+18]
		y := x[i*34 : i*34+34 : i*34+34]
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			q := a[2+j]
			s0 += (int32(q&0xf) - 8) * int32(int8(y[2+j]))
			s1 += (int32(q>>4) - 8) * int32(int8(y[18+j]))
		}
		sumf += float32(float32(float32(s0+s1)*fp16(a, 0)) * fp16(y, 0))
	}
	return sumf
}

func dotQ4_1(n int, w, x []byte) float32 {
	nb := n / qk
	var sumf float32
	for i := 0; i < nb; i++ {
		a := w[i*20 : i*20+20 : i*20+20]
		y := x[i*36 : i*36+36 : i*36+36]
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			q := a[4+j]
			s0 += int32(q&0xf) * int32(int8(y[4+j]))
			s1 += int32(q>>4) * int32(int8(y[20+j]))
		}
		t := float32(float32(fp16(a, 0)*fp16(y, 0))*float32(s0+s1)) + float32(fp16(a, 2)*fp16(y, 2))
		sumf += t
	}
	return sumf
}

func dotQ5_0(n int, w, x []byte) float32 {
	nb := n / qk
	var sumf float32
	for i := 0; i < nb; i++ {
		a := w[i*22 : i*22+22 : i*22+22]
		y := x[i*34 : i*34+34 : i*34+34]
		qh := le32(a, 2)
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			q := a[6+j]
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			s0 += (int32(q&0xf|h0) - 16) * int32(int8(y[2+j]))
			s1 += (int32(q>>4|h1) - 16) * int32(int8(y[18+j]))
		}
		sumf += float32(float32(fp16(a, 0)*fp16(y, 0)) * float32(s0+s1))
	}
	return sumf
}

func dotQ5_1(n int, w, x []byte) float32 {
	nb := n / qk
	var sumf float32
	for i := 0; i < nb; i++ {
		a := w[i*24 : i*24+24 : i*24+24]
		y := x[i*36 : i*36+36 : i*36+36]
		qh := le32(a, 4)
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			q := a[8+j]
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			s0 += int32(q&0xf|h0) * int32(int8(y[4+j]))
			s1 += int32(q>>4|h1) * int32(int8(y[20+j]))
		}
		t := float32(float32(fp16(a, 0)*fp16(y, 0))*float32(s0+s1)) + float32(fp16(a, 2)*fp16(y, 2))
		sumf += t
	}
	return sumf
}

func dotQ8_0(n int, w, x []byte) float32 {
	nb := n / qk
	var sumf float32
	for i := 0; i < nb; i++ {
		a := w[i*34 : i*34+34 : i*34+34]
		y := x[i*34 : i*34+34 : i*34+34]
		aq := a[2:34:34]
		yq := y[2:34:34]
		var s int32
		for j := range aq {
			s += int32(int8(aq[j])) * int32(int8(yq[j]))
		}
		sumf += float32(float32(s) * float32(fp16(a, 0)*fp16(y, 0)))
	}
	return sumf
}

// dotQ8_1 has no ggml kernel (Q8_1 weights do not occur); it is the plain
// blockwise product, provided for completeness.
func dotQ8_1(n int, w, x []byte) float32 {
	nb := n / qk
	var sumf float32
	for i := 0; i < nb; i++ {
		a := w[i*36 : i*36+36 : i*36+36]
		y := x[i*36 : i*36+36 : i*36+36]
		aq := a[4:36:36]
		yq := y[4:36:36]
		var s int32
		for j := range aq {
			s += int32(int8(aq[j])) * int32(int8(yq[j]))
		}
		sumf += float32(float32(s) * float32(fp16(a, 0)*fp16(y, 0)))
	}
	return sumf
}
