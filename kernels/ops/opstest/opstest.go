// Package opstest makes test data for the kernels of kernels/ops, shared by
// the interpreter's tests and the generated code's.
package opstest

import (
	"math/rand/v2"

	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
)

// Types maps each BlockDecode's name to its quant type.
var Types = map[string]quant.Type{
	"Q4_0": quant.Q4_0, "Q4_1": quant.Q4_1, "Q5_0": quant.Q5_0, "Q5_1": quant.Q5_1, "Q8_0": quant.Q8_0,
	"Q4_K": quant.Q4_K, "Q6_K": quant.Q6_K,
}

// Blocks is n random blocks of d whose f16 scales are finite and sane
// (magnitudes about 2^-10 to 2^1, either sign), every other byte random.
func Blocks(d ops.BlockDecode, n int, r *rand.Rand) []byte {
	b := make([]byte, n*d.Bytes)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		for _, off := range d.F16 {
			h := uint16(r.IntN(2))<<15 | uint16(5+r.IntN(11))<<10 | uint16(r.IntN(1024))
			b[i*d.Bytes+off], b[i*d.Bytes+off+1] = byte(h), byte(h>>8)
		}
	}
	return b
}

// Floats is n values uniform in [-s, s).
func Floats(n int, s float32, r *rand.Rand) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = (2*r.Float32() - 1) * s
	}
	return x
}

// Args is a fresh, deterministic argument list for the kernel of
// ops.Groups named name, or nil for an unknown name.
func Args(name string, seed uint64) []any {
	r := rand.New(rand.NewPCG(seed, 99))
	for _, d := range ops.Blocks() {
		switch name {
		case "Dequant" + d.Name:
			return []any{Blocks(d, 3, r), make([]float32, 3*d.QK)}
		case "MatVec" + d.Name:
			cols := 512
			return []any{Blocks(d, 7*cols/d.QK, r), Floats(cols, 1, r), make([]float32, 7)}
		}
	}
	n := 37 + r.IntN(64)
	switch name {
	case "RMSNorm":
		return []any{Floats(n, 2, r), Floats(n, 2, r), make([]float32, n), float32(1e-6)}
	case "RMSNormNoWeight":
		return []any{Floats(n, 2, r), make([]float32, n), float32(1e-6)}
	case "Softmax":
		return []any{Floats(n, 10, r), make([]float32, n)}
	case "RopeNormal", "RopeNeox":
		return []any{Floats(3*64, 2, r), make([]float32, 3*64), 1 + r.IntN(500), 64, 48, float32(10000), float32(1)}
	}
	return nil
}
