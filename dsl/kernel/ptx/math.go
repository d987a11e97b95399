package ptx

import (
	"math"
	"math/big"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// The transcendental functions. PTX has no correctly rounded exp, log, sin,
// cos or pow (ex2.approx and friends are a few f32 ulps off), so each is an
// f64 sequence of IEEE ops, written once over fops: the PTX emitter below
// renders it, and the tests run it in Go against package math. An f32
// function widens to f64, runs the sequence, and rounds once, as the
// interpreter's float32(math.F(float64(x))) does; the two f64 values differ
// by an f64 ulp or so, which changes the f32 rounding only when the exact
// value lies within that of an f32 rounding boundary (never seen in tests).

// fops are the f64 and s64 operations the sequences are made of. V is a
// value (f64 or s64, as each op says), P a predicate.
type fops[V, P any] interface {
	c(x float64) V // f64 constant
	add(a, b V) V
	sub(a, b V) V
	mul(a, b V) V
	div(a, b V) V
	fma(a, b, c V) V
	sqrt(a V) V
	abs(a V) V
	neg(a V) V
	rni(a V) V   // to the nearest integer, ties to even (an f64)
	rzi(a V) V   // toward zero (an f64)
	toInt(a V) V // f64 to s64, toward zero
	i2f(a V) V   // s64 to f64
	bits(a V) V  // f64 bits as s64
	float(a V) V // s64 bits as f64
	ic(x int64) V
	iadd(a, b V) V
	isub(a, b V) V
	iand(a, b V) V
	ior(a, b V) V
	ishl(a V, n int) V
	ishr(a V, n int) V // arithmetic
	lt(a, b V) P       // f64, ordered
	gt(a, b V) P
	eq(a, b V) P
	nan(a V) P
	ieq(a, b V) P // s64
	ilt(a, b V) P
	not(p P) P
	and(p, q P) P
	or(p, q P) P
	sel(p P, a, b V) V // p ? a : b, a and b of one class
	isel(p P, a, b V) V
}

// Constants to past f64 precision, split with math/big.
var (
	ln2Hi, ln2Lo        = split2("0.693147180559945309417232121458176568075500134360255254120680009")
	pio2A, pio2B, pio2C = split3("1.570796326794896619231321691639751442098584699687552910487472296")
	twoOverPi           = bigF("0.636619772367581343075535053490057448137838582201698628")
	log2e               = bigF("1.442695040888963407359924681001892137426645954152985934")
	sqrt2               = math.Sqrt2
	invFact             [20]float64 // 1/n!
	inf, negInf                     = math.Inf(1), math.Inf(-1)
	nanBits             uint64      = 0x7ff8000000000000
)

func init() {
	f := new(big.Float).SetPrec(200).SetInt64(1)
	for n := range invFact {
		if n > 0 {
			f.Mul(f, new(big.Float).SetInt64(int64(n)))
		}
		invFact[n], _ = new(big.Float).Quo(big.NewFloat(1).SetPrec(200), f).Float64()
	}
}

func bigF(s string) float64 {
	f, _, _ := big.ParseFloat(s, 10, 256, big.ToNearestEven)
	x, _ := f.Float64()
	return x
}

func split2(s string) (float64, float64) {
	f, _, _ := big.ParseFloat(s, 10, 256, big.ToNearestEven)
	hi, _ := f.Float64()
	lo, _ := new(big.Float).Sub(f, new(big.Float).SetFloat64(hi)).Float64()
	return hi, lo
}

func split3(s string) (float64, float64, float64) {
	f, _, _ := big.ParseFloat(s, 10, 256, big.ToNearestEven)
	a, _ := f.Float64()
	r := new(big.Float).Sub(f, new(big.Float).SetFloat64(a))
	b, _ := r.Float64()
	c, _ := new(big.Float).Sub(r, new(big.Float).SetFloat64(b)).Float64()
	return a, b, c
}

// horner is c[0] + x·(c[1] + x·(c[2] + …)), with fma.
func horner[V, P any](m fops[V, P], x V, c []float64) V {
	p := m.c(c[len(c)-1])
	for i := len(c) - 2; i >= 0; i-- {
		p = m.fma(p, x, m.c(c[i]))
	}
	return p
}

// exp64: x = k·ln2 + r with |r| ≤ ln2/2 (Cody–Waite, the high part exact
// under fma), e^r by its Taylor series to r^13 (truncation < 0.05 ulp),
// then ·2^k in two halves so overflow and gradual underflow round once.
func exp64[V, P any](m fops[V, P], x V) V {
	x = m.sel(m.lt(x, m.c(-746)), m.c(-746), x) // past either end the answer is 0 or +Inf; NaN passes
	x = m.sel(m.gt(x, m.c(710)), m.c(710), x)
	kf := m.rni(m.mul(x, m.c(log2e)))
	r := m.fma(kf, m.c(-ln2Hi), x)
	r = m.fma(kf, m.c(-ln2Lo), r)
	p := horner(m, r, invFact[:14])
	k := m.toInt(kf)
	k1 := m.ishr(k, 1)
	k2 := m.isub(k, k1)
	s1 := m.float(m.ishl(m.iadd(k1, m.ic(1023)), 52))
	s2 := m.float(m.ishl(m.iadd(k2, m.ic(1023)), 52))
	return m.mul(m.mul(p, s1), s2)
}

// log64: x = 2^e·(1+f) with 1+f in [√½, √2), then log(1+f) = f − (f²/2 −
// s·(f²/2 + R(s²))) for s = f/(2+f), R the atanh series to s^22: the
// leading f is exact, so the rounding errors sit in small corrections.
func log64[V, P any](m fops[V, P], x V) V {
	sub := m.lt(x, m.c(0x1p-1022)) // subnormals are scaled up first
	xs := m.sel(sub, m.mul(x, m.c(0x1p54)), x)
	b := m.bits(xs)
	e := m.isub(m.ishr(b, 52), m.ic(1023))
	e = m.isel(sub, m.isub(e, m.ic(54)), e)
	mant := m.float(m.ior(m.iand(b, m.ic(0x000fffffffffffff)), m.ic(0x3ff0000000000000)))
	hi := m.gt(mant, m.c(sqrt2))
	mant = m.sel(hi, m.mul(mant, m.c(0.5)), mant)
	e = m.isel(hi, m.iadd(e, m.ic(1)), e)
	f := m.sub(mant, m.c(1))
	s := m.div(f, m.add(f, m.c(2)))
	z := m.mul(s, s)
	var rc [11]float64
	for n := range rc {
		rc[n] = 2 / float64(2*n+3)
	}
	R := m.mul(z, horner(m, z, rc[:]))
	hfsq := m.mul(m.c(0.5), m.mul(f, f))
	ef := m.i2f(e)
	t := m.fma(s, m.add(hfsq, R), m.mul(ef, m.c(ln2Lo)))
	res := m.fma(ef, m.c(ln2Hi), m.sub(f, m.sub(hfsq, t)))
	res = m.sel(m.eq(x, m.c(inf)), x, res)
	res = m.sel(m.lt(x, m.c(0)), m.float(m.ic(int64(nanBits))), res)
	res = m.sel(m.eq(x, m.c(0)), m.c(negInf), res)
	return m.sel(m.nan(x), x, res)
}

// sincos64 reduces x by multiples of π/2 in three parts (exact for the
// first under fma; good to |x| < 2^29, past which Go switches to
// Payne–Hanek and this gives NaN), then picks sin or cos of the
// remainder |r| ≤ π/4 by quadrant, each a Taylor series (to r^17, r^16).
func sincos64[V, P any](m fops[V, P], x V, cos bool) V {
	kf := m.rni(m.mul(x, m.c(twoOverPi)))
	r := m.fma(kf, m.c(-pio2A), x)
	r = m.fma(kf, m.c(-pio2B), r)
	r = m.fma(kf, m.c(-pio2C), r)
	q := m.toInt(kf)
	z := m.mul(r, r)
	var sc, cc [8]float64
	for i := range sc {
		sign := float64(1 - 2*((i+1)%2)) // -1/3!, +1/5!, …
		sc[i] = sign * invFact[2*i+3]
		cc[i] = sign * invFact[2*i+2]
	}
	sinr := m.fma(m.mul(r, z), horner(m, z, sc[:]), r)
	cosr := m.fma(z, horner(m, z, cc[:]), m.c(1))
	if cos {
		q = m.iadd(q, m.ic(1)) // cos x = sin(x + π/2)
	}
	odd := m.ieq(m.iand(q, m.ic(1)), m.ic(1))
	v := m.sel(odd, cosr, sinr)
	v = m.sel(m.ieq(m.iand(q, m.ic(2)), m.ic(2)), m.neg(v), v)
	if !cos {
		v = m.sel(m.eq(x, m.c(0)), x, v) // sin(±0) = ±0
	}
	// past the reduction's range a NaN is louder than a wrong value
	return m.sel(m.lt(m.abs(x), m.c(0x1p29)), v, m.float(m.ic(int64(nanBits))))
}

// pow64 is exp(y·log|x|), the product's rounding error recovered with an
// fma and applied to first order, then Go's special cases and sign rules.
func pow64[V, P any](m fops[V, P], x, y V) V {
	ax := m.abs(x)
	l := log64(m, ax)
	t := m.mul(y, l)
	finite := m.lt(m.abs(t), m.c(inf))
	tlo := m.sel(finite, m.fma(y, l, m.neg(t)), m.c(0))
	r := exp64(m, t)
	r = m.sel(m.lt(r, m.c(inf)), m.fma(r, tlo, r), r)
	yint := m.eq(m.rzi(y), y)
	h := m.mul(y, m.c(0.5))
	yodd := m.and(yint, m.not(m.eq(m.rzi(h), h)))
	xneg := m.ilt(m.bits(x), m.ic(0))
	r = m.sel(m.and(xneg, yodd), m.neg(r), r)
	xfin := m.lt(ax, m.c(inf))
	nanv := m.float(m.ic(int64(nanBits)))
	r = m.sel(m.and(m.and(m.lt(x, m.c(0)), xfin), m.not(yint)), nanv, r)
	regular := m.and(xfin, m.not(m.eq(x, m.c(0))))
	r = m.sel(m.and(regular, m.eq(y, m.c(0.5))), m.sqrt(x), r)
	r = m.sel(m.and(regular, m.eq(y, m.c(-0.5))), m.div(m.c(1), m.sqrt(x)), r)
	r = m.sel(m.and(m.eq(x, m.c(-1)), m.eq(m.abs(y), m.c(inf))), m.c(1), r)
	r = m.sel(m.eq(y, m.c(1)), x, r)
	return m.sel(m.or(m.eq(y, m.c(0)), m.eq(x, m.c(1))), m.c(1), r)
}

// math renders op of kind k on a (and b, for pow) through the f64
// sequences.
func (f *fn) math(op kernel.Op, k kernel.Kind, a, b string) string {
	m := emitter{f}
	if k == kernel.F32 {
		w := f.reg(cF64)
		f.ins("cvt.f64.f32 %s, %s", w, a)
		a = w
		if b != "" {
			w := f.reg(cF64)
			f.ins("cvt.f64.f32 %s, %s", w, b)
			b = w
		}
	}
	f.out.WriteString("\t// " + op.String() + " in f64\n")
	var r string
	switch op {
	case kernel.OpExp:
		r = exp64[string, string](m, a)
	case kernel.OpLog:
		r = log64[string, string](m, a)
	case kernel.OpSin, kernel.OpCos:
		r = sincos64[string, string](m, a, op == kernel.OpCos)
	case kernel.OpPow:
		r = pow64[string, string](m, a, b)
	default:
		f.fail("op %s unsupported", op)
		return "%err"
	}
	if k == kernel.F32 {
		n := f.reg(cF32)
		f.ins("cvt.rn.f32.f64 %s, %s", n, r)
		return n
	}
	return r
}

// emitter renders fops as PTX.
type emitter struct{ f *fn }

func (m emitter) op(c class, format string, args ...any) string {
	r := m.f.reg(c)
	m.f.ins(format, append([]any{r}, args...)...)
	return r
}

func (m emitter) c(x float64) string          { return m.f.f64(x) }
func (m emitter) add(a, b string) string      { return m.op(cF64, "add.rn.f64 %s, %s, %s", a, b) }
func (m emitter) sub(a, b string) string      { return m.op(cF64, "sub.rn.f64 %s, %s, %s", a, b) }
func (m emitter) mul(a, b string) string      { return m.op(cF64, "mul.rn.f64 %s, %s, %s", a, b) }
func (m emitter) div(a, b string) string      { return m.op(cF64, "div.rn.f64 %s, %s, %s", a, b) }
func (m emitter) fma(a, b, c string) string   { return m.op(cF64, "fma.rn.f64 %s, %s, %s, %s", a, b, c) }
func (m emitter) sqrt(a string) string        { return m.op(cF64, "sqrt.rn.f64 %s, %s", a) }
func (m emitter) abs(a string) string         { return m.op(cF64, "abs.f64 %s, %s", a) }
func (m emitter) neg(a string) string         { return m.op(cF64, "neg.f64 %s, %s", a) }
func (m emitter) rni(a string) string         { return m.op(cF64, "cvt.rni.f64.f64 %s, %s", a) }
func (m emitter) rzi(a string) string         { return m.op(cF64, "cvt.rzi.f64.f64 %s, %s", a) }
func (m emitter) toInt(a string) string       { return m.op(c64, "cvt.rzi.s64.f64 %s, %s", a) }
func (m emitter) i2f(a string) string         { return m.op(cF64, "cvt.rn.f64.s64 %s, %s", a) }
func (m emitter) bits(a string) string        { return m.op(c64, "mov.b64 %s, %s", a) }
func (m emitter) float(a string) string       { return m.op(cF64, "mov.b64 %s, %s", a) }
func (m emitter) ic(x int64) string           { return m.op(c64, "mov.b64 %s, %d", x) }
func (m emitter) iadd(a, b string) string     { return m.op(c64, "add.s64 %s, %s, %s", a, b) }
func (m emitter) isub(a, b string) string     { return m.op(c64, "sub.s64 %s, %s, %s", a, b) }
func (m emitter) iand(a, b string) string     { return m.op(c64, "and.b64 %s, %s, %s", a, b) }
func (m emitter) ior(a, b string) string      { return m.op(c64, "or.b64 %s, %s, %s", a, b) }
func (m emitter) ishl(a string, n int) string { return m.op(c64, "shl.b64 %s, %s, %d", a, n) }
func (m emitter) ishr(a string, n int) string { return m.op(c64, "shr.s64 %s, %s, %d", a, n) }
func (m emitter) lt(a, b string) string       { return m.op(cPred, "setp.lt.f64 %s, %s, %s", a, b) }
func (m emitter) gt(a, b string) string       { return m.op(cPred, "setp.gt.f64 %s, %s, %s", a, b) }
func (m emitter) eq(a, b string) string       { return m.op(cPred, "setp.eq.f64 %s, %s, %s", a, b) }
func (m emitter) nan(a string) string         { return m.op(cPred, "setp.nan.f64 %s, %s, %s", a, a) }
func (m emitter) ieq(a, b string) string      { return m.op(cPred, "setp.eq.s64 %s, %s, %s", a, b) }
func (m emitter) ilt(a, b string) string      { return m.op(cPred, "setp.lt.s64 %s, %s, %s", a, b) }
func (m emitter) not(p string) string         { return m.op(cPred, "not.pred %s, %s", p) }
func (m emitter) and(p, q string) string      { return m.op(cPred, "and.pred %s, %s, %s", p, q) }
func (m emitter) or(p, q string) string       { return m.op(cPred, "or.pred %s, %s, %s", p, q) }
func (m emitter) sel(p, a, b string) string   { return m.op(cF64, "selp.f64 %s, %s, %s, %s", a, b, p) }
func (m emitter) isel(p, a, b string) string  { return m.op(c64, "selp.b64 %s, %s, %s, %s", a, b, p) }
