package ptx

import (
	"math"
	"math/rand/v2"
	"testing"
)

// goOps runs the f64 sequences in Go, op for op as the PTX does: values are
// bits, read as f64 or s64 as each op says (cvt.rzi.s64 saturates and maps
// NaN to 0, as PTX's does).
type goOps struct{}

func fv(a uint64) float64 { return math.Float64frombits(a) }
func vf(x float64) uint64 { return math.Float64bits(x) }
func iv(a uint64) int64   { return int64(a) }
func b2(c bool, a, b uint64) uint64 {
	if c {
		return a
	}
	return b
}

func (goOps) c(x float64) uint64              { return vf(x) }
func (goOps) add(a, b uint64) uint64          { return vf(fv(a) + fv(b)) }
func (goOps) sub(a, b uint64) uint64          { return vf(fv(a) - fv(b)) }
func (goOps) mul(a, b uint64) uint64          { return vf(fv(a) * fv(b)) }
func (goOps) div(a, b uint64) uint64          { return vf(fv(a) / fv(b)) }
func (goOps) fma(a, b, c uint64) uint64       { return vf(math.FMA(fv(a), fv(b), fv(c))) }
func (goOps) sqrt(a uint64) uint64            { return vf(math.Sqrt(fv(a))) }
func (goOps) abs(a uint64) uint64             { return vf(math.Abs(fv(a))) }
func (goOps) neg(a uint64) uint64             { return vf(-fv(a)) }
func (goOps) rni(a uint64) uint64             { return vf(math.RoundToEven(fv(a))) }
func (goOps) rzi(a uint64) uint64             { return vf(math.Trunc(fv(a))) }
func (goOps) i2f(a uint64) uint64             { return vf(float64(iv(a))) }
func (goOps) bits(a uint64) uint64            { return a }
func (goOps) float(a uint64) uint64           { return a }
func (goOps) ic(x int64) uint64               { return uint64(x) }
func (goOps) iadd(a, b uint64) uint64         { return a + b }
func (goOps) isub(a, b uint64) uint64         { return a - b }
func (goOps) iand(a, b uint64) uint64         { return a & b }
func (goOps) ior(a, b uint64) uint64          { return a | b }
func (goOps) ishl(a uint64, n int) uint64     { return a << n }
func (goOps) ishr(a uint64, n int) uint64     { return uint64(iv(a) >> n) }
func (goOps) lt(a, b uint64) bool             { return fv(a) < fv(b) }
func (goOps) gt(a, b uint64) bool             { return fv(a) > fv(b) }
func (goOps) eq(a, b uint64) bool             { return fv(a) == fv(b) }
func (goOps) nan(a uint64) bool               { return math.IsNaN(fv(a)) }
func (goOps) ieq(a, b uint64) bool            { return a == b }
func (goOps) ilt(a, b uint64) bool            { return iv(a) < iv(b) }
func (goOps) not(p bool) bool                 { return !p }
func (goOps) and(p, q bool) bool              { return p && q }
func (goOps) or(p, q bool) bool               { return p || q }
func (goOps) sel(p bool, a, b uint64) uint64  { return b2(p, a, b) }
func (goOps) isel(p bool, a, b uint64) uint64 { return b2(p, a, b) }

func (goOps) toInt(a uint64) uint64 {
	x := math.Trunc(fv(a))
	switch {
	case math.IsNaN(x):
		return 0
	case x >= 0x1p63:
		return math.MaxInt64
	case x < -0x1p63:
		return 1 << 63
	}
	return uint64(int64(x))
}

var gm goOps

func gexp(x float64) float64    { return fv(exp64[uint64, bool](gm, vf(x))) }
func glog(x float64) float64    { return fv(log64[uint64, bool](gm, vf(x))) }
func gsin(x float64) float64    { return fv(sincos64[uint64, bool](gm, vf(x), false)) }
func gcos(x float64) float64    { return fv(sincos64[uint64, bool](gm, vf(x), true)) }
func gpow(x, y float64) float64 { return fv(pow64[uint64, bool](gm, vf(x), vf(y))) }

// ulps is the distance between a and b in f64 ulps (0 for equal bits or
// two NaNs).
func ulps(a, b float64) float64 {
	if math.IsNaN(a) && math.IsNaN(b) || a == b {
		return 0
	}
	if math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return math.Inf(1)
	}
	u := math.Abs(math.Nextafter(b, math.Inf(1)) - b)
	if b == 0 {
		u = 5e-324
	}
	return math.Abs(a-b) / u
}

func check1(t *testing.T, name string, got, want func(float64) float64, xs []float64, maxUlp float64) {
	t.Helper()
	worst, at := 0.0, 0.0
	f32miss := 0
	for _, x := range xs {
		g, w := got(x), want(x)
		if u := ulps(g, w); u > worst {
			worst, at = u, x
		}
		x32 := float64(float32(x))
		if g, w := float32(got(x32)), float32(want(x32)); math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			f32miss++
			if f32miss < 4 {
				t.Errorf("%s(float32 %v): %v, Go %v", name, float32(x), float32(got(x32)), float32(want(x32)))
			}
		}
	}
	t.Logf("%s: max %.2f f64 ulp (at %v); f32 roundings differing: %d of %d", name, worst, at, f32miss, len(xs))
	if worst > maxUlp {
		t.Errorf("%s: %.2f ulp at %v (%v, Go %v), want ≤ %v", name, worst, at, got(at), want(at), maxUlp)
	}
}

func samples(r *rand.Rand, n int, lo, hi float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = lo + float64((hi-lo)*r.Float64())
	}
	return xs
}

func TestMathSequences(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	specials := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 2, math.Inf(1), math.Inf(-1), math.NaN(),
		5e-324, 0x1p-1022, math.MaxFloat64, 709.78, 709.79, -745.1, -745.2, -708, 1e-300, math.Pi, -math.Pi / 2}
	// Go's amd64 Exp overflows early (to +Inf from about 709.5, below the
	// true limit 709.78), so the range checked stops at 709.
	exps := append(samples(r, n, -100, 100), samples(r, n/4, -745, 709)...)
	check1(t, "exp", gexp, math.Exp, append(exps, specials[:11]...), 2)
	if g := gexp(709.7); math.IsInf(g, 0) || ulps(g, 1.6549840276802644e+308) > 1 {
		t.Errorf("exp(709.7) = %v", g)
	}
	logs := append(samples(r, n, 0, 4), samples(r, n/4, 0, 1e6)...)
	for i := 0; i < n/4; i++ {
		if x := math.Float64frombits(r.Uint64() &^ (1 << 63)); x >= 0x1p-1022 {
			logs = append(logs, x)
		}
	}
	// Go's amd64 Log is wrong for subnormals (about log 2^-1023 for all of
	// them): those are checked as log(x·2^54) − 54·ln2 instead.
	var subs []float64
	for i := 0; i < 1000; i++ {
		subs = append(subs, math.Float64frombits(r.Uint64()>>12))
	}
	check1(t, "log", glog, math.Log, append(logs, specials[:4]...), 1)
	check1(t, "log of subnormals", glog, func(x float64) float64 { return math.Log(x*0x1p54) - 54*math.Ln2 }, subs, 1)
	for _, x := range specials {
		if g, w := glog(x), math.Log(x); x >= 0x1p-1022 || x <= 0 || x != x {
			if math.Float64bits(g) != math.Float64bits(w) && !(g != g && w != w) && ulps(g, w) > 1 {
				t.Errorf("log(%v) = %v, Go %v", x, g, w)
			}
		}
	}
	trig := append(samples(r, n, -10, 10), samples(r, n/4, -1e6, 1e6)...)
	trig = append(trig, samples(r, n/10, -1e8, 1e8)...)
	trig = append(trig, specials[:len(specials)-9]...)
	trig = append(trig, 0x1p29-64)
	// Go is a few ulps off near multiples of π/2; this is the correct value
	if g := gsin(math.Pi); g != 1.2246467991473532e-16 {
		t.Errorf("sin(π) = %v", g)
	}
	check1(t, "sin", gsin, math.Sin, trig, 1.5)
	check1(t, "cos", gcos, math.Cos, trig, 1.5)
	for _, x := range []float64{0x1p29, -1e300, math.Inf(1)} {
		if !math.IsNaN(gsin(x)) || !math.IsNaN(gcos(x)) {
			t.Errorf("sin, cos(%v) = %v, %v, want NaN past the reduction's range", x, gsin(x), gcos(x))
		}
	}
}

func TestPow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sp := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, -0.5, 2, -2, 3, -3, 2.5, math.Inf(1), math.Inf(-1), math.NaN(), 1e-310, 10000}
	for _, x := range sp {
		for _, y := range sp {
			g, w := gpow(x, y), math.Pow(x, y)
			// special results exactly; others to the bound below
			if math.Float64bits(g) != math.Float64bits(w) && !(math.IsNaN(g) && math.IsNaN(w)) && ulps(g, w) > 64 {
				t.Errorf("pow(%v, %v) = %v, Go %v", x, y, g, w)
			}
		}
	}
	// the range rope uses: base^(-2i/dims), and f32 values generally
	worst, miss := 0.0, 0
	for i := 0; i < 200000; i++ {
		x := float64(float32(r.Float64() * 20000))
		y := float64(float32(-4 + float64(8*r.Float64())))
		g, w := gpow(x, y), math.Pow(x, y)
		if math.IsInf(w, 0) || w == 0 {
			continue
		}
		worst = max(worst, math.Abs(g-w)/math.Abs(w))
		if float32(g) != float32(w) {
			miss++
		}
	}
	t.Logf("pow: max relative error %.3g (%.1f f64 ulp); f32 roundings differing: %d", worst, worst/0x1p-53, miss)
	if worst > 64*0x1p-53 || miss > 0 {
		t.Errorf("pow: relative error %.3g, %d f32 misses", worst, miss)
	}
}
