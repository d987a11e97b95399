package quant

import "math"

// The float kernels follow ggml's generic ggml_vec_dot_f32/_f16/_bf16: each
// product is rounded to float32, the running sum is a double (ggml_float).

func dotF32(n int, w, x []byte) float32 {
	w = w[:4*n]
	x = x[:4*n]
	var s float64
	for i := 0; i < len(w); i += 4 {
		a := math.Float32frombits(le32(w, i))
		b := math.Float32frombits(le32(x, i))
		s += float64(float32(a * b))
	}
	return float32(s)
}

func dotF16(n int, w, x []byte) float32 {
	w = w[:2*n]
	x = x[:2*n]
	var s float64
	for i := 0; i < len(w); i += 2 {
		s += float64(float32(fp16(w, i) * fp16(x, i)))
	}
	return float32(s)
}

func dotBF16(n int, w, x []byte) float32 {
	w = w[:2*n]
	x = x[:2*n]
	var s float64
	for i := 0; i < len(w); i += 2 {
		s += float64(float32(BF16ToF32(le16(w, i)) * BF16ToF32(le16(x, i))))
	}
	return float32(s)
}
