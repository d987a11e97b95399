package exec

import (
	"math"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// elemNative is the registered native per-element loops (kernels/amd64/elem,
// bit for bit the Go ones they replace), nil fields where there are none.
// Package variables initialize after the imported packages' init, so the
// registration has happened.
var elemNative, _ = cpukern.LookupElementwise()

// siluBlocks is the native ggml_v_silu on a row's blocks of 16, or nil.
var siluBlocks = elemNative.SiLU

// silu is quant.SiLUAVX512 (ggml's AVX512 ggml_v_silu on blocks of 16, the
// C library's expf for the rest), with the blocks native where registered.
func silu(x, y []float32) {
	if siluBlocks == nil {
		quant.SiLUAVX512(x, y)
		return
	}
	n := len(x)
	siluBlocks(x, y[:n])
	for k := n &^ 15; k < n; k++ {
		v := x[k]
		y[k] = v / (1 + float32(math.Exp(float64(-v))))
	}
}
