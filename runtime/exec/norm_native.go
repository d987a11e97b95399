package exec

import "math"

// rmsNormNative is cpugen.RMSNorm (cpugen.RMSNormNoWeight where w is nil)
// with its last loop, y = (x·scale)·w, done by the native sc
// (elemNative.Scale). The sum of squares stays this serial float64 loop:
// its order (ggml's rms_norm sums in ggml_float, one value after another)
// is the result, and at one add's latency a value Go's loop is already as
// fast as the order allows. The expressions are cpugen's, conversions
// included (norm_native_test.go holds the two equal).
func rmsNormNative(sc func(x []float32, s float32, w, y []float32), x, w, y []float32, eps float32) {
	n := len(x)
	ss := float64(0)
	for _, xi := range x {
		ss = float64(ss + float64(float32(xi*xi)))
	}
	mean := float32(float64(ss / float64(n)))
	scale := float32(1 / float32(math.Sqrt(float64(float32(mean+eps)))))
	sc(x, scale, w, y[:n])
}
