package quant

import "math"

// FMA32 is the float32 fused multiply-add a*b + c rounded once, as the
// hardware's VFMADD and PTX's fma.rn.f32 round it. float32(math.FMA(...))
// rounds twice (to float64, then to float32) and misses by an ulp when the
// float64 sum lands exactly on a float32 midpoint that the exact sum is not
// on; only then (or for float32 subnormals) does the slow path run.
func FMA32(a, b, c float32) float32 {
	s := math.FMA(float64(a), float64(b), float64(c))
	if bits := math.Float64bits(s); bits&(1<<29-1) == 1<<28 || bits<<1 < minNormal32Bits<<1 {
		return fma32Slow(a, b, c)
	}
	return float32(s)
}

// minNormal32Bits is float64(2^-126), the smallest normal float32.
const minNormal32Bits = 0x3810000000000000

// fma32Slow rounds the float64 sum s = p + c to odd before the conversion,
// which makes the float32 rounding the only one (float64 keeps more than
// 24+2 bits).
func fma32Slow(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b)) // exact: 24+24 bits fit in 53
	s := p + float64(c)
	if s == 0 || math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	// TwoSum: the exact error of the float64 sum.
	bv := s - p
	e := (p - (s - bv)) + (float64(c) - bv)
	if bits := math.Float64bits(s); e != 0 && bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++ // the exact sum is farther from zero than s
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}
