package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// Mat-vecs of the float weight types and the activation rounding that lets
// the quantized mat-vecs (MatVec over a BlockDecode, f32 activations) see
// the activations the CPU matmul sees: that one quantizes each input row to
// the weight type's dot partner (Q8_0, Q8_1 or Q8_K, with x86 rounding) and
// dots integers, so a GPU mat-vec over the dequantized partner values
// differs from it only by the order of f32 rounding.

// MatVecF32 is MatVecF32(w []byte, x, y []float32): y[r] = Σ_i W[r][i]·x[i]
// for the len(y) f32 rows of W, each len(x) wide: products in f32 summed in
// f64 (ggml's scalar ggml_vec_dot_f32 order), rounded to f32 once.
func MatVecF32() *k.Kernel {
	return floatMatVec("F32", 4, func(w *k.Buf, o k.Expr) k.Expr { return w.F32(o) }, keepF32)
}

// MatVecF16 is MatVecF16(w []byte, x, y []float32) for f16 rows: x is first
// rounded to f16, as the CPU matmul converts it to F16 (ggml's vec_dot_type
// of F16), then as MatVecF32.
func MatVecF16() *k.Kernel {
	return floatMatVec("F16", 2, func(w *k.Buf, o k.Expr) k.Expr { return w.F16(o) }, roundF16)
}

// keepF32 and roundF16 are the float mat-vecs' activation roundings: x as
// it is (F32 weights), x rounded to f16 and widened (F16 weights).
func keepF32(_ *k.Builder, x k.Expr) k.Expr { return x }

func roundF16(_ *k.Builder, x k.Expr) k.Expr { return x.F32ToF16().F16ToF32() }

func floatMatVec(name string, size int, load func(w *k.Buf, off k.Expr) k.Expr, round func(b *k.Builder, x k.Expr) k.Expr) *k.Kernel {
	b := k.New("MatVec" + name)
	b.Doc("sets y[r] to row r of the " + name + " matrix w dotted with x.")
	w, x, y := b.Buffer("w", k.U8), b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	n := b.Let("n", x.Len())
	b.ParallelFor("r", 0, y.Len(), func(r k.Expr) {
		base := b.Let("base", r.Mul(n))
		sum := b.Acc("sum", k.OpAdd, k.D(0))
		b.For("i", 0, n, func(i k.Expr) {
			b.Fold(sum, load(w, base.Add(i).Mul(size)).Mul(round(b, x.At(i))).Cvt(k.F64))
		})
		b.Store(y, r, sum.Get().Cvt(k.F32))
	})
	return b.MustBuild()
}

// rne rounds an f32 of magnitude below 2^22 to the nearest integer, ties to
// even, as ggml's nearest_int and the x86 _MM_ROUND_NEAREST do: adding
// 1.5·2^23 leaves no fraction bits, and the rounding of that add is the
// rounding wanted.
func rne(v k.Expr) k.Expr { return v.Add(12582912).Sub(12582912) }

// absF is |v| (v and -v are both exact).
func absF(v k.Expr) k.Expr { return v.Max(v.Neg()) }

// QuantRoundQ8_0 is QuantRoundQ8_0(x, y []float32): each block of 32 values
// of x quantized as the CPU matmul quantizes an activation row to Q8_0 or
// Q8_1 (x86 rounding: d = amax/127, q = round_even(v·127/amax)) and
// decoded, q·f16(d), into y.
func QuantRoundQ8_0() *k.Kernel { return QuantRoundQ8_0To(k.F32) }

// QuantRoundQ8_0To is QuantRoundQ8_0 into y of kind out: F32, or U16 for
// the decoded values rounded to f16 (what a tensor-core product rounds
// them to), kernel QuantRoundQ8_0F16.
func QuantRoundQ8_0To(out k.Kind) *k.Kernel {
	b := k.New("QuantRoundQ8_0" + f16Suffix(out))
	b.Doc("sets y to x quantized to Q8_0 blocks (x86 rounding) and decoded" + f16Doc(out) + ".")
	x, y := b.Buffer("x", k.F32), b.Buffer("y", out)
	b.ParallelFor("blk", 0, y.Len().Div(32), func(i k.Expr) {
		xb := b.View("xb", x, i.Mul(32), 32)
		yb := b.View("yb", y, i.Mul(32), 32)
		q, d := quantQ8_0(b, xb.At)
		b.For("j", 0, 32, func(j k.Expr) { b.Store(yb, j, asOut(q(j).Mul(d), out)) })
	})
	return b.MustBuild()
}

// f16Suffix, f16Doc and asOut name and round a rounding kernel's output
// for its kind: F32, or U16 holding f16 bits.
func f16Suffix(out k.Kind) string {
	if out == k.U16 {
		return "F16"
	}
	return ""
}

func f16Doc(out k.Kind) string {
	if out == k.U16 {
		return ", rounded to f16"
	}
	return ""
}

func asOut(v k.Expr, out k.Kind) k.Expr {
	if out == k.U16 {
		return v.F32ToF16()
	}
	return v
}

// quantQ8_0 quantizes a block of 32 as the CPU matmul quantizes an
// activation to Q8_0 (x86 rounding): q(j) is value j's quant (an integral
// F32), d the block's scale (f16-rounded).
func quantQ8_0(b *k.Builder, at func(j any) k.Expr) (q func(j k.Expr) k.Expr, d k.Expr) {
	amax := b.Acc("amax", k.OpMax, k.F(0))
	b.For("j", 0, 32, func(j k.Expr) { b.Fold(amax, absF(at(j))) })
	a := b.Let("a", amax.Get())
	d = b.Let("d", a.Div(127).F32ToF16().F16ToF32())
	id := b.Let("id", k.Select(a.Ne(k.F(0)), k.F(127).Div(a), k.F(0)))
	return func(j k.Expr) k.Expr { return rne(at(j).Mul(id)) }, d
}

// QuantRoundQ8_K is QuantRoundQ8_K(x, y []float32): each block of 256
// values quantized as ggml's quantize_row_q8_K (iscale = -127/max with max
// the value of largest magnitude, first such; q = min(127,
// nearest_int(iscale·v)); d = 1/iscale) and decoded, q·d, into y.
func QuantRoundQ8_K() *k.Kernel { return QuantRoundQ8_KTo(k.F32) }

// QuantRoundQ8_KTo is QuantRoundQ8_K into y of kind out (QuantRoundQ8_0To).
func QuantRoundQ8_KTo(out k.Kind) *k.Kernel {
	b := k.New("QuantRoundQ8_K" + f16Suffix(out))
	b.Doc("sets y to x quantized to Q8_K blocks and decoded" + f16Doc(out) + ".")
	x, y := b.Buffer("x", k.F32), b.Buffer("y", out)
	b.ParallelFor("blk", 0, y.Len().Div(256), func(i k.Expr) {
		xb := b.View("xb", x, i.Mul(256), 256)
		yb := b.View("yb", y, i.Mul(256), 256)
		q, is, zero := quantQ8_K(b, xb.At)
		d := b.Let("d", k.F(1).Div(is))
		b.For("j", 0, 256, func(j k.Expr) { b.Store(yb, j, asOut(k.Select(zero, k.F(0), q(j).Mul(d)), out)) })
	})
	return b.MustBuild()
}

// quantQ8_K quantizes a block of 256 as ggml's quantize_row_q8_K: q(j) is
// value j's quant (an integral F32), is the inverse scale −127/max (max
// the value of largest magnitude, first such), zero whether the block is
// all zeros (is and q(j) are then not numbers).
func quantQ8_K(b *k.Builder, at func(j any) k.Expr) (q func(j k.Expr) k.Expr, is, zero k.Expr) {
	amax := b.Acc("amax", k.OpMax, k.F(0))
	b.For("j", 0, 256, func(j k.Expr) { b.Fold(amax, absF(at(j))) })
	a := b.Let("a", amax.Get())
	first := b.Acc("first", k.OpMin, k.I(255))
	b.For("j", 0, 256, func(j k.Expr) { b.Fold(first, k.Select(absF(at(j)).Eq(a), j, k.I(255))) })
	mx := b.Let("mx", at(first.Get()))
	is = b.Let("iscale", k.F(-127).Div(mx))
	return func(j k.Expr) k.Expr { return rne(is.Mul(at(j))).Min(k.F(127)) }, is, a.Eq(k.F(0))
}
