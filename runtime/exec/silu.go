package exec

import (
	"math"

	"github.com/jitllm/jitllm/kernels/cpukern"
)

// elemNative is the registered native per-element loops (kernels/amd64/elem,
// bit for bit the Go ones they replace), nil fields where there are none.
// Package variables initialize after the imported packages' init, so the
// registration has happened.
var elemNative, _ = cpukern.LookupElementwise()

// siluBlocks is the native ggml_v_silu on a row's blocks of 16, or nil.
var siluBlocks = elemNative.SiLU

// silu is quant.SiLUAVX512 (ggml's AVX512 ggml_v_silu on blocks of 16, the
// C library's expf for the rest) with its exp's final scaling done by
// multiplying by a power of two built from bits, not math.Ldexp: j·2^n is
// exact in float64 for the |n| <= 192 that reach it, so rounding it to
// float32 once gives the same value (silu_test.go holds them equal).
func silu(x, y []float32) {
	n := len(x)
	np := n &^ 15
	if siluBlocks != nil {
		siluBlocks(x, y[:n])
	} else {
		siluGo(x[:np], y[:np])
	}
	for k := np; k < n; k++ {
		v := x[k]
		y[k] = v / (1 + float32(math.Exp(float64(-v))))
	}
}

// siluGo is the portable form of the blocks of 16 (len(x) a multiple of 16).
func siluGo(x, y []float32) {
	for k, v := range x {
		y[k] = v / (1 + expfAVX512(0-v))
	}
}

func fma32(a, b, c float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

// expfAVX512 is quant.ExpfAVX512.
func expfAVX512(x float32) float32 {
	const r = float32(0x1.8p23)
	z := fma32(x, 0x1.715476p+0, r)
	n := z - r
	b := fma32(-n, 0x1.7f7d1cp-20, fma32(-n, 0x1.62e4p-1, x))
	u := b * b
	j := fma32(
		fma32(fma32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fma32(0x1.555e66p-3, b, 0x1.fffdb6p-2)),
		u,
		fma32(0x1.ffffecp-1, b, 1))
	if math.Float32frombits(math.Float32bits(n)&^(1<<31)) > 192 {
		if n <= 0 {
			return 0
		}
		return float32(math.Inf(1))
	}
	return float32(float64(j) * math.Float64frombits(uint64(int64(n)+1023)<<52))
}
