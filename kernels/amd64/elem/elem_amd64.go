//go:build amd64

package elem

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

func init() {
	if cpuid.CPU.Supports(cpuid.AVX512F) {
		// math.Exp takes its FMA path on every AVX-512 CPU (AVX and FMA),
		// which Exp reproduces.
		cpukern.RegisterElementwise(cpukern.Elementwise{ISA: "avx512", Rank: 20, SiLU: SiLUBlocks, Exp: Exp,
			Add: Add, Mul: Mul, Scale: Scale, F16: F16})
	}
}

// SiLUBlocks is cpukern.Elementwise.SiLU: the len(x)&^15 leading values of
// y get ggml_v_silu of x's. It needs AVX-512F (the init checks).
func SiLUBlocks(x, y []float32) {
	if len(y) < len(x) {
		panic(fmt.Sprintf("elem: silu of %d values into %d", len(x), len(y)))
	}
	if nb := len(x) / 16; nb > 0 {
		siluAVX512(nb, unsafe.SliceData(x), unsafe.SliceData(y))
	}
}

// Exp is cpukern.Elementwise.Exp: y[i] = math.Exp(x[i]) for i < len(x),
// blocks of 8 in assembly and the rest by math.Exp. It needs AVX-512F.
func Exp(x, y []float64) {
	if len(y) < len(x) {
		panic(fmt.Sprintf("elem: exp of %d values into %d", len(x), len(y)))
	}
	np := len(x) &^ 7
	if np > 0 {
		expAVX512(np/8, unsafe.SliceData(x), unsafe.SliceData(y))
	}
	for i := np; i < len(x); i++ {
		y[i] = math.Exp(x[i])
	}
}

func checkLens(op string, n int, lens ...int) {
	for _, l := range lens {
		if l < n {
			panic(fmt.Sprintf("elem: %s of %d values with an operand of %d", op, n, l))
		}
	}
}

// Add is cpukern.Elementwise.Add (AVX-512F).
func Add(a, b, y []float32) {
	n := len(y)
	checkLens("add", n, len(a), len(b))
	if nb := n / 16; nb > 0 {
		addAVX512(nb, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(y))
	}
	for i := n &^ 15; i < n; i++ {
		y[i] = a[i] + b[i]
	}
}

// Mul is cpukern.Elementwise.Mul (AVX-512F).
func Mul(a, b, y []float32) {
	n := len(y)
	checkLens("mul", n, len(a), len(b))
	if nb := n / 16; nb > 0 {
		mulAVX512(nb, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(y))
	}
	for i := n &^ 15; i < n; i++ {
		y[i] = a[i] * b[i]
	}
}

// Scale is cpukern.Elementwise.Scale (AVX-512F).
func Scale(x []float32, s float32, w, y []float32) {
	n := len(y)
	checkLens("scale", n, len(x))
	var wp *float32
	if w != nil {
		checkLens("scale", n, len(w))
		wp = unsafe.SliceData(w)
	}
	if nb := n / 16; nb > 0 {
		scaleAVX512(nb, unsafe.SliceData(x), s, wp, unsafe.SliceData(y))
	}
	for i := n &^ 15; i < n; i++ {
		if w != nil {
			y[i] = float32(x[i]*s) * w[i]
		} else {
			y[i] = x[i] * s
		}
	}
}

// F16 is cpukern.Elementwise.F16 (AVX-512F).
func F16(x []float32, y []uint16) {
	n := len(x)
	checkLens("f16", n, len(y))
	if nb := n / 16; nb > 0 {
		f16AVX512(nb, unsafe.SliceData(x), unsafe.SliceData(y))
	}
	for i := n &^ 15; i < n; i++ {
		y[i] = quant.F32ToF16(x[i])
	}
}
