package a

import "b"

type F32 float32

func sums(a, b, c float32, x, y, z float64, f, g F32, n int) { // want sums:`addsParams\(0x65\)`
	_ = a*b + c          // want `float32 product a \* b may be fused into an FMA \(operand of \+\)`
	_ = c + a*b          // want `float32 product a \* b may be fused`
	_ = a*b - c          // want `float32 product a \* b may be fused`
	_ = c - a*b          // want `float32 product a \* b may be fused`
	_ = c + -(a * b)     // want `float32 product a \* b may be fused`
	_ = (x * y) + z      // want `float64 product x \* y may be fused`
	_ = a*b + c*a        // want `float32 product a \* b may be fused` `float32 product c \* a may be fused`
	_ = a*b*c + a        // want `float32 product a \* b \* c may be fused`
	_ = f*g + f          // want `F32 product f \* g may be fused`
	_ = float32(a*b) + c // converted: rounded, not fused
	_ = float32(a*b + c) // want `float32 product a \* b may be fused`
	_ = a*b + c          //nofma:ok fusion accepted here
	_ = n*n + n          // integers are exact
	_ = a * b            // no addition
	_ = a * b * c        // products only
	_ = 2.0*3.0 + 1.0    // constant: folded exactly
	const k = 0.5
	_ = k*k + a // constant product
	c += a * b  // want `float32 product a \* b may be fused into an FMA \(operand of \+=\)`
	c -= a * b  // want `float32 product a \* b may be fused into an FMA \(operand of -=\)`
	c += float32(a * b)
	c *= a * b
}

func held(a, b, c float32) float32 { // want held:`addsParams\(0x4\)`
	t := a * b    // want `float32 product a \* b may be fused into an FMA \(held in t, which is added at`
	u := a * b    // not added anywhere
	var v = a * c // want `float32 product a \* c may be fused into an FMA \(held in v`
	w := float32(a * b)
	_ = u * c
	return c + t - v + w
}

func ret(a, b float32) float32 {
	return a * b // want `float32 product a \* b may be fused into an FMA \(returned`
}

func retOK(a, b float32) (float32, int) {
	return float32(a * b), 2 * 3
}

var global float32

func inMemory(a, b, c float32) float32 { // want inMemory:`addsParams\(0x4\)`
	global = a * b // a package variable is stored, not an SSA value
	s := struct{ p float32 }{}
	s.p = a * b
	return c + global + s.p
}

func closure(a, b, c float32) func() float32 { // want closure:`addsParams\(0x4\)`
	t := a * b // want `held in t`
	return func() float32 { return c + t }
}

func accumulate(a, b, c float32, xs []float32) float32 {
	s := a * b // want `held in s, which is added at`
	for _, x := range xs {
		s += float32(x * c)
	}
	return s
}

func nearest(f float32) int32 { // want nearest:`addsParams\(0x1\)`
	return int32(f + 12582912)
}

// handsOn adds its first parameter through nearest, not its second.
func handsOn(f, g float32) int32 { // want handsOn:`addsParams\(0x1\)`
	return nearest(f) + int32(g)
}

func calls(x, y float32) {
	_ = nearest(x * y)          // want `passed to nearest, which adds that parameter`
	_ = nearest(float32(x * y)) // converted
	_ = handsOn(x*y, x*y)       // want `passed to handsOn, which adds that parameter`
	_ = b.Round(x * y)          // want `passed to Round, which adds that parameter`
	_ = b.Scale(x * y)          // multiplies only
}
