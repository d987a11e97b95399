package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// QuantizeQ8_K's and QuantizeQ8_0's quants times their scales are
// QuantRoundQ8_K's and QuantRoundQ8_0's values, bit for bit, zero blocks
// included; their F16 forms store those values rounded to f16.
func TestQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	x := opstest.Floats(4*256, 3, r)
	for j := 256; j < 512; j++ {
		x[j] = 0
	}
	for _, c := range []struct {
		quantize, round, round16 *k.Kernel
		qk                       int
	}{{ops.QuantizeQ8_K(), ops.QuantRoundQ8_K(), ops.QuantRoundQ8_KTo(k.U16), 256}, {ops.QuantizeQ8_0(), ops.QuantRoundQ8_0(), ops.QuantRoundQ8_0To(k.U16), 32}} {
		xq, xd := make([]byte, len(x)), make([]float32, len(x)/c.qk)
		if err := k.Run(c.quantize, x, xq, xd); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(x))
		if err := k.Run(ops.QuantRoundWarp(c.round), x, want); err != nil {
			t.Fatal(err)
		}
		for j := range x {
			if got := float32(int8(xq[j])) * xd[j/c.qk]; math.Float32bits(got) != math.Float32bits(want[j]) {
				t.Fatalf("%s value %d: %v·%v = %v, %s %v", c.quantize.Name, j, int8(xq[j]), xd[j/c.qk], got, c.round.Name, want[j])
			}
		}
		half := make([]uint16, len(x))
		if err := k.Run(ops.QuantRoundWarp(c.round16), x, half); err != nil {
			t.Fatal(err)
		}
		for j, h := range half {
			if w := quant.F32ToF16(want[j]); h != w {
				t.Fatalf("%s value %d: %#04x, want %#04x", c.round16.Name, j, h, w)
			}
		}
	}
}

// The rows-a-warp forms give the one-row forms' bits.
func TestMatVecDotRows(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const n, out = 512, 8
	x := opstest.Floats(n, 2, r)
	res := opstest.Floats(out, 1, r)
	for _, form := range []string{"", "Add", "SiLU", "Mul"} {
		for name, one := range ops.DotMatVecsRows(form, 1) {
			xq, xd := partner(t, name, x)
			typ := opstest.Type(name)
			var w []byte
			for range out {
				w = append(w, opstest.Row(typ, n, nil, r)...)
			}
			args := func(y []float32) []any {
				if form == "Add" || form == "Mul" {
					return []any{w, xq, xd, res, y}
				}
				return []any{w, xq, xd, y}
			}
			want := make([]float32, out)
			if err := k.Run(one(), args(want)...); err != nil {
				t.Fatal(err)
			}
			for _, rows := range []int{2, 4} {
				kern := ops.DotMatVecsRows(form, rows)[name]()
				got := make([]float32, out)
				if err := k.Run(kern, args(got)...); err != nil {
					t.Fatal(err)
				}
				for o := range out {
					if math.Float32bits(got[o]) != math.Float32bits(want[o]) {
						t.Errorf("%s row %d: %v, one row a warp %v", kern.Name, o, got[o], want[o])
					}
				}
			}
		}
	}
}

// RMSNormQuantize gives RMSNorm's row quantized by QuantizeQ8_K /
// QuantizeQ8_0, bit for bit (the row's sum of squares lands on the same
// f32 mean in either tree order here), zero blocks included.
func TestRMSNormQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	const n = 2048
	w := opstest.Floats(n, 1, r)
	for rep := range 4 {
		x := opstest.Floats(n, 3, r)
		if rep == 1 {
			for j := 256; j < 512; j++ {
				x[j] = 0
			}
		}
		y := make([]float32, n)
		if err := k.Run(ops.RMSNormCTA(true), x, w, y, float32(1e-5)); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			quantize *k.Kernel
			qk       int
		}{{ops.QuantizeQ8_K(), 256}, {ops.QuantizeQ8_0(), 32}} {
			wq, wd := make([]byte, n), make([]float32, n/c.qk)
			if err := k.Run(c.quantize, y, wq, wd); err != nil {
				t.Fatal(err)
			}
			fused := ops.RMSNormQuantize(c.qk)
			xq, xd := make([]byte, n), make([]float32, n/c.qk)
			if err := k.Run(fused, x, w, xq, xd, float32(1e-5)); err != nil {
				t.Fatal(err)
			}
			for j := range xq {
				if xq[j] != wq[j] {
					t.Fatalf("%s rep %d quant %d: %d, want %d", fused.Name, rep, j, int8(xq[j]), int8(wq[j]))
				}
			}
			for b := range xd {
				if math.Float32bits(xd[b]) != math.Float32bits(wd[b]) {
					t.Fatalf("%s rep %d scale %d: %v, want %v", fused.Name, rep, b, xd[b], wd[b])
				}
			}
		}
	}
}

// RMSNormQuantize over several rows (a verify step's) quantizes each as it
// quantizes that row alone.
func TestRMSNormQuantizeRows(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const n, rows = 512, 3
	w := opstest.Floats(n, 1, r)
	x := opstest.Floats(rows*n, 3, r)
	for _, qk := range []int{256, 32} {
		kern := ops.RMSNormQuantize(qk)
		xq, xd := make([]byte, rows*n), make([]float32, rows*n/qk)
		if err := k.Run(kern, x, w, xq, xd, float32(1e-5)); err != nil {
			t.Fatal(err)
		}
		for row := range rows {
			q, d := make([]byte, n), make([]float32, n/qk)
			if err := k.Run(kern, x[row*n:(row+1)*n], w, q, d, float32(1e-5)); err != nil {
				t.Fatal(err)
			}
			for j := range q {
				if xq[row*n+j] != q[j] {
					t.Fatalf("%s row %d quant %d: %d, alone %d", kern.Name, row, j, int8(xq[row*n+j]), int8(q[j]))
				}
			}
			for b := range d {
				if math.Float32bits(xd[row*n/qk+b]) != math.Float32bits(d[b]) {
					t.Fatalf("%s row %d scale %d: %v, alone %v", kern.Name, row, b, xd[row*n/qk+b], d[b])
				}
			}
		}
	}
}

// gateUp is two random matrices of out rows of n values of typ, rows
// drawn in turn (a gate's and an up projection's).
func gateUp(typ quant.Type, n, out int, r *rand.Rand) (wg, wu []byte) {
	for range out {
		wg = append(wg, opstest.Row(typ, n, nil, r)...)
		wu = append(wu, opstest.Row(typ, n, nil, r)...)
	}
	return wg, wu
}

// partner quantizes x as the integer mat-vec of weight type name reads it.
func partner(t *testing.T, name string, x []float32) (xq []byte, xd []float32) {
	qk, kern := 256, ops.QuantizeQ8_K()
	if name == "Q8_0" {
		qk, kern = 32, ops.QuantizeQ8_0()
	}
	xq, xd = make([]byte, len(x)), make([]float32, len(x)/qk)
	if err := k.Run(kern, x, xq, xd); err != nil {
		t.Fatal(err)
	}
	return xq, xd
}

// The integer mat-vecs are the decoded weights times the quantized
// activation within f32 rounding (the integer sums are exact); the Add and
// SiLU forms store the residual sum and the SiLU of the plain form's bits.
func TestMatVecDot(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const n, out = 768, 9
	x := opstest.Floats(n, 2, r)
	res := opstest.Floats(out, 1, r)
	for name, mk := range ops.DotMatVecs() {
		xq, xd := partner(t, name, x)
		qk := n / len(xd)
		typ := opstest.Type(name)
		var w []byte
		for range out {
			w = append(w, opstest.Row(typ, n, nil, r)...)
		}
		vals := make([]float32, out*n)
		if err := quant.Dequantize(typ, w, vals); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, out)
		if err := k.Run(mk(), w, xq, xd, y); err != nil {
			t.Fatal(err)
		}
		for o := range out {
			var want, mag float64
			for j := range n {
				p := float64(float64(vals[o*n+j]) * float64(int8(xq[j])) * float64(xd[j/qk]))
				want += p
				mag += math.Abs(p)
			}
			if d := math.Abs(float64(y[o]) - want); d > 1e-5*mag {
				t.Errorf("%s row %d: %v, want %v (Σ|p| %v)", name, o, y[o], want, mag)
			}
		}
		ya, ys, ym := make([]float32, out), make([]float32, out), make([]float32, out)
		if err := k.Run(ops.DotMatVecsRows("Add", 1)[name](), w, xq, xd, res, ya); err != nil {
			t.Fatal(err)
		}
		if err := k.Run(ops.DotMatVecsRows("Mul", 1)[name](), w, xq, xd, res, ym); err != nil {
			t.Fatal(err)
		}
		if err := k.Run(ops.DotMatVecsRows("SiLU", 1)[name](), w, xq, xd, ys); err != nil {
			t.Fatal(err)
		}
		for o := range out {
			if ya[o] != res[o]+y[o] {
				t.Errorf("%s Add row %d: %v, want %v", name, o, ya[o], res[o]+y[o])
			}
			if ym[o] != res[o]*y[o] {
				t.Errorf("%s Mul row %d: %v, want %v", name, o, ym[o], res[o]*y[o])
			}
			v := y[o]
			if want := v / (1 + float32(math.Exp(float64(-v)))); math.Abs(float64(ys[o]-want)) > float64(1e-6*math.Abs(float64(want)))+1e-30 {
				t.Errorf("%s SiLU row %d: %v, want %v", name, o, ys[o], want)
			}
		}
	}
}

// The SwiGLU form is the SiLU form on the gate's matrix, then the Mul form
// on the up projection's by that SiLU, bit for bit, in every shape (the
// shapes' trees are each other's only where Threads agrees: compared
// shape by shape).
func TestMatVecDotSwiGLU(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const n, out = 1024, 8
	x := opstest.Floats(n, 2, r)
	for _, name := range []string{"Q4_K", "Q6_K", "Q8_0"} {
		xq, xd := partner(t, name, x)
		wg, wu := gateUp(opstest.Type(name), n, out, r)
		for _, sh := range []ops.DotShape{{}, {Rows: 2, Threads: 64, Unroll: 2}, {Rows: 4, Threads: 128}} {
			gate, want, got := make([]float32, out), make([]float32, out), make([]float32, out)
			if err := k.Run(ops.DotMatVec("SiLU", name, sh), wg, xq, xd, gate); err != nil {
				t.Fatal(err)
			}
			if err := k.Run(ops.DotMatVec("Mul", name, sh), wu, xq, xd, gate, want); err != nil {
				t.Fatal(err)
			}
			kern := ops.DotMatVec("SwiGLU", name, sh)
			if err := k.Run(kern, wg, wu, xq, xd, got); err != nil {
				t.Fatal(err)
			}
			for o := range out {
				if math.Float32bits(got[o]) != math.Float32bits(want[o]) {
					t.Errorf("%s row %d: %v, SiLU then Mul %v", kern.Name, o, got[o], want[o])
				}
			}
		}
	}
}

// Embed decodes the rows its tokens name exactly as quant.Dequantize does,
// for every block type.
func TestEmbed(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const cols, rows = 512, 5
	if len(ops.Blocks()) < 5 {
		t.Fatalf("only %d block types", len(ops.Blocks()))
	}
	for _, d := range ops.Blocks() {
		typ := opstest.Type(d.Name)
		var w []byte
		for range rows {
			w = append(w, opstest.Row(typ, cols, nil, r)...)
		}
		all := make([]float32, rows*cols)
		if err := quant.Dequantize(typ, w, all); err != nil {
			t.Fatal(err)
		}
		tok := []int32{3, 0, 4, 3}
		y := make([]float32, len(tok)*cols)
		if err := k.Run(ops.Embed(d), w, tok, y, cols); err != nil {
			t.Fatal(err)
		}
		for i, tk := range tok {
			for j := range cols {
				if got, want := y[i*cols+j], all[int(tk)*cols+j]; math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s token %d value %d: %v, want %v", d.Name, tk, j, got, want)
				}
			}
		}
	}
}

// A shape's prefetch or stage changes nothing: every form's bits with and
// without, and a stage holds every weight load of its group (the
// interpreter fails a load outside it), whether its room fits the rows or
// not.
func TestMatVecDotPrefetch(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const n, out = 512, 8
	x := opstest.Floats(n, 2, r)
	res := opstest.Floats(out, 1, r)
	for _, name := range []string{"Q4_K", "Q6_K", "Q8_0"} {
		xq, xd := partner(t, name, x)
		wg, wu := gateUp(opstest.Type(name), n, out, r)
		for _, form := range []string{"", "Add", "SwiGLU"} {
			rowBytes := len(wg) / out
			shapes := []ops.DotShape{{}, {Prefetch: true}, {Stage: 2 * rowBytes}, {Stage: rowBytes}, {Stage: 1}}
			ys := make([][]float32, len(shapes))
			for i, sh := range shapes {
				sh.Rows, sh.Threads, sh.Unroll = 2, 64, 2
				in := []any{wg, xq, xd}
				switch form {
				case "Add":
					in = append(in, res)
				case "SwiGLU":
					in = []any{wg, wu, xq, xd}
				}
				ys[i] = make([]float32, out)
				if err := k.Run(ops.DotMatVec(form, name, sh), append(in, ys[i])...); err != nil {
					t.Fatal(err)
				}
			}
			for i := 1; i < len(shapes); i++ {
				for o := range out {
					if math.Float32bits(ys[0][o]) != math.Float32bits(ys[i][o]) {
						t.Errorf("%s%s row %d: %v with %+v, %v without", form, name, o, ys[i][o], shapes[i], ys[0][o])
					}
				}
			}
		}
	}
}

// Q4_K and Q6_KA against a Q8_0 activation (Q4_KQ8_0, Q6_KAQ8_0: a scale
// a block of 32) are the decoded weights times the decoded activation
// within f32 rounding, in one-row and several-row shapes, and each shape
// forms the one-row bits.
func TestMatVecDotQ8_0Activation(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, c := range []struct {
		name string
		typ  quant.Type
		n    int
	}{{"Q4_KQ8_0", quant.Q4_K, 1024}, {"Q6_KAQ8_0", quant.Q6_K, 4096}} {
		const out = 6
		n := c.n
		x := opstest.Floats(n, 2, r)
		xq, xd := partner(t, "Q8_0", x)
		var w []byte
		for range out {
			w = append(w, opstest.Row(c.typ, n, nil, r)...)
		}
		vals := make([]float32, out*n)
		if err := quant.Dequantize(c.typ, w, vals); err != nil {
			t.Fatal(err)
		}
		if c.typ == quant.Q6_K {
			w = repackedQ6_KA(t, w)
		}
		y := make([]float32, out)
		if err := k.Run(ops.DotMatVec("", c.name, ops.DotShape{}), w, xq, xd, y); err != nil {
			t.Fatal(err)
		}
		for o := range out {
			var want, mag float64
			for j := range n {
				p := float64(float64(vals[o*n+j]) * float64(int8(xq[j])) * float64(xd[j/32]))
				want += p
				mag += math.Abs(p)
			}
			if d := math.Abs(float64(y[o]) - want); d > 1e-5*mag {
				t.Errorf("%s row %d: %v, want %v (Σ|p| %v)", c.name, o, y[o], want, mag)
			}
		}
		for _, sh := range []ops.DotShape{{Rows: 2, Unroll: 2}, {Rows: 3, Threads: 64}} {
			got := make([]float32, out)
			if err := k.Run(ops.DotMatVec("", c.name, sh), w, xq, xd, got); err != nil {
				t.Fatal(err)
			}
			one := make([]float32, out)
			if err := k.Run(ops.DotMatVec("", c.name, ops.DotShape{Threads: sh.Threads}), w, xq, xd, one); err != nil {
				t.Fatal(err)
			}
			for o := range out {
				if math.Float32bits(got[o]) != math.Float32bits(one[o]) {
					t.Errorf("%s shape %v row %d: %v, one row a group %v", c.name, sh, o, got[o], one[o])
				}
			}
		}
	}
}

// A mat-vec of several activation rows (DotShape.Acts) gives each row the
// one-row mat-vec's bits in the same shape, in every store form.
func TestMatVecDotActs(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const n, out = 512, 8
	for _, name := range []string{"Q4_K", "Q6_K", "Q8_0"} {
		typ := opstest.Type(name)
		wg, wu := gateUp(typ, n, out, r)
		for _, sh := range []ops.DotShape{{Rows: 2, Unroll: 2, Acts: 3}, {Rows: 2, Threads: 128, Acts: 4}, {Acts: 2}} {
			acts := sh.Acts
			x := opstest.Floats(acts*n, 2, r)
			res := opstest.Floats(acts*out, 1, r)
			var xq []byte
			var xd []float32
			for a := range acts { // each row quantized on its own
				q, d := partner(t, name, x[a*n:(a+1)*n])
				xq, xd = append(xq, q...), append(xd, d...)
			}
			for _, form := range []string{"", "Add", "SiLU", "Mul", "SwiGLU"} {
				args := func(xq []byte, xd, res, y []float32) []any {
					switch form {
					case "Add", "Mul":
						return []any{wg, xq, xd, res, y}
					case "SwiGLU":
						return []any{wg, wu, xq, xd, y}
					}
					return []any{wg, xq, xd, y}
				}
				kern := ops.DotMatVec(form, name, sh)
				got := make([]float32, acts*out)
				if err := k.Run(kern, args(xq, xd, res, got)...); err != nil {
					t.Fatal(err)
				}
				one := sh
				one.Acts = 0
				for a := range acts {
					nd := len(xd) / acts
					want := make([]float32, out)
					if err := k.Run(ops.DotMatVec(form, name, one), args(xq[a*n:(a+1)*n], xd[a*nd:(a+1)*nd], res[a*out:(a+1)*out], want)...); err != nil {
						t.Fatal(err)
					}
					for o := range out {
						if g := got[a*out+o]; math.Float32bits(g) != math.Float32bits(want[o]) {
							t.Errorf("%s activation row %d, row %d: %v, one row's mat-vec %v", kern.Name, a, o, g, want[o])
						}
					}
				}
			}
		}
	}
}

// The split RopeKV stack (q and k of one type, v of another) stores what
// the two RopeKV launches it replaces store, bit for bit, where they take
// its shape: q's rows into y, k's and v's into the caches' row.
func TestMatVecDotRopeKVSplit(t *testing.T) {
	if !ops.CanSplitRopeKV("Q4_K", "Q6_K") || !ops.CanSplitRopeKV("Q4_K", "Q6_KA") || ops.CanSplitRopeKV("Q4_K", "Q8_0") || ops.CanSplitRopeKV("Q4_K", "F16") {
		t.Error("CanSplitRopeKV: Q4_K beside Q6_K and Q6_KA (Q8_K activations), not beside Q8_0 or a float type")
	}
	r := rand.New(rand.NewPCG(21, 22))
	const hd, nq, nk, nv, pos = 8, 16, 8, 8, 3
	freqs := []float32{1, 1.5, 2.5, 4}
	step := []int32{0, pos}
	// v in Q6_K, and in the Q6_KA layout (a weight block of eight of the
	// activation's)
	for _, c := range []struct {
		typB string
		n    int
	}{{"Q6_K", 512}, {"Q6_KA", ops.Q6_KA.QK}} {
		n := c.n
		x := opstest.Floats(n, 2, r)
		xq, xd := partner(t, "Q4_K", x)
		rows := func(typ quant.Type, m int) []byte {
			var w []byte
			for range m {
				w = append(w, opstest.Row(typ, n, nil, r)...)
			}
			return w
		}
		wa, wb := rows(quant.Q4_K, nq+nk), rows(quant.Q6_K, nv)
		if c.typB == ops.Q6_KA.Name {
			if err := ops.RepackQ6_KA(wb, slices.Clone(wb)); err != nil {
				t.Fatal(err)
			}
		}
		ss := opstest.Floats(n/32, 1, r) // sums of squares for the Norm shapes
		for i := range ss {
			ss[i] = 1 + float32(ss[i]*ss[i])
		}
		for _, sh := range []ops.DotShape{{Rows: 2}, {Rows: 2, Unroll: 2}, {Rows: 4, Threads: 64}, {Rows: 2, Unroll: 2, Norm: true}, {Rows: 4, Threads: 64, Norm: true}} {
			act := []any{xq, xd}
			if sh.Norm {
				act = append(act, ss, float32(1e-5))
			}
			for _, ub := range []int{1, 2} {
				// bufs are the weights and the activation; y holds q's and k's rows
				run := func(kern *k.Kernel, bufs ...any) (y []float32, kc, vc []uint16) {
					y = make([]float32, nq+nk)
					kc, vc = make([]uint16, (pos+1)*nk), make([]uint16, (pos+1)*nv)
					if err := k.Run(kern, append(bufs, y, kc, vc, step, freqs, nq, nk, hd, hd, float32(0.9), float32(1))...); err != nil {
						t.Fatal(err)
					}
					return y, kc, vc
				}
				what := fmt.Sprintf("%s %v/u%d", c.typB, sh, ub)
				y, kc, vc := run(ops.DotMatVecRopeKVSplit("Q4_K", c.typB, sh, ub), append([]any{wa, wb}, act...)...)
				// the two launches: q and k, then v alone (no q or k rows)
				ya, kca, _ := run(ops.DotMatVec("RopeKV", "Q4_K", sh), append([]any{wa}, act...)...)
				vb := ops.DotShape{Rows: sh.Rows, Threads: sh.Threads, Unroll: ub, Norm: sh.Norm}
				yb := make([]float32, nv)
				kcb, vcb := make([]uint16, (pos+1)*nk), make([]uint16, (pos+1)*nv)
				if err := k.Run(ops.DotMatVec("RopeKV", c.typB, vb), append(append([]any{wb}, act...), yb, kcb, vcb, step, freqs, 0, 0, hd, hd, float32(0.9), float32(1))...); err != nil {
					t.Fatal(err)
				}
				for i := range nq {
					if math.Float32bits(y[i]) != math.Float32bits(ya[i]) {
						t.Errorf("%s: q row %d %v, want %v", what, i, y[i], ya[i])
					}
				}
				for i := range kc {
					if kc[i] != kca[i] {
						t.Errorf("%s: k cache %d %#x, want %#x", what, i, kc[i], kca[i])
					}
				}
				for i := range vc {
					if vc[i] != vcb[i] {
						t.Errorf("%s: v cache %d %#x, want %#x", what, i, vc[i], vcb[i])
					}
				}
				if vc[pos*nv] == 0 && vc[pos*nv+1] == 0 && kc[pos*nk] == 0 {
					t.Errorf("%s: nothing cached at row %d", what, pos)
				}
			}
		}
	}
}

// The SwiGLU that quantizes its own output (DotSwiGLUQ8_0) gives the
// SwiGLU mat-vec's output and QuantizeQ8_0's quants and scales of it, bit
// for bit, run phase by phase and CTA by CTA (each CTA quantizes only the
// rows it computed, whatever the grid).
func TestDotSwiGLUQ8_0(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	const n, out = 512, 32 * 5
	wg, wu := gateUp(quant.Q4_K, n, out, r)
	xq, xd := partner(t, "Q8_K", opstest.Floats(n, 2, r))
	for _, sh := range []ops.DotShape{{Unroll: 2}, {Rows: 2}, {Rows: 4, Threads: 64}, {Rows: 2, Unroll: 2, Stage: 4608}} {
		y := make([]float32, out)
		if err := k.Run(ops.DotMatVec("SwiGLU", "Q4_K", sh), wg, wu, xq, xd, y); err != nil {
			t.Fatal(err)
		}
		yq, yd := partner(t, "Q8_0", y)
		lk, err := ops.DotSwiGLUQ8_0("Q4_K", sh)
		if err != nil {
			t.Fatal(err)
		}
		checkLocal(t, fmt.Sprint(sh), lk, out/32, func(o []any) []any { return []any{wg, wu, xq, xd, o[0], o[0], o[1], o[2]} }, y, yq, yd)
	}
	if _, err := ops.DotSwiGLUQ8_0("Q4_K", ops.DotShape{Rows: 3}); err == nil {
		t.Error("3 rows a group: no error")
	}
}

// checkLocal runs local phased kernel lk phase by phase (k.Run) and CTA
// by CTA (k.RunCTAs over 1, 2 and ctas CTAs) on args(outs), outs fresh
// buffers shaped as want's ([]float32 or []byte), and checks each run's
// outs equal want bit for bit.
func checkLocal(t *testing.T, name string, lk *k.Kernel, ctas int, args func(outs []any) []any, want ...any) {
	t.Helper()
	for _, c := range []int{0, 1, 2, ctas} {
		outs := make([]any, len(want))
		for i, w := range want {
			switch w := w.(type) {
			case []float32:
				outs[i] = make([]float32, len(w))
			case []byte:
				outs[i] = make([]byte, len(w))
			}
		}
		var err error
		if c == 0 {
			err = k.Run(lk, args(outs)...)
		} else {
			err = k.RunCTAs(lk, c, args(outs)...)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			bad := -1
			switch w := w.(type) {
			case []float32:
				bad = firstDiff(f32Bits(outs[i].([]float32)), f32Bits(w))
			case []byte:
				bad = firstDiff(outs[i].([]byte), w)
			}
			if bad >= 0 {
				t.Fatalf("%s, %d CTAs (0: phase by phase): output %d differs at %d", name, c, i, bad)
			}
		}
	}
}

// firstDiff is the first index where a and b differ, −1 for none.
func firstDiff[T comparable](a, b []T) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func f32Bits(v []float32) []uint32 {
	b := make([]uint32, len(v))
	for i, x := range v {
		b[i] = math.Float32bits(x)
	}
	return b
}

// DotAddNormQ8_0 is the Add mat-vec and then NormPartQ8_0 over its
// output, bit for bit, whether its CTAs run together or one after another.
func TestDotAddNormQ8_0(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	const n, out = 512, 32 * 5
	w, _ := gateUp(quant.Q4_K, n, out, r)
	xq, xd := partner(t, "Q8_K", opstest.Floats(n, 2, r))
	res, nw := opstest.Floats(out, 1, r), opstest.Floats(out, 1, r)
	for _, sh := range []ops.DotShape{{Unroll: 2}, {Rows: 2}, {Rows: 4, Threads: 64}, {Rows: 2, Unroll: 2, Stage: 4608}} {
		y := make([]float32, out)
		if err := k.Run(ops.DotMatVec("Add", "Q4_K", sh), w, xq, xd, res, y); err != nil {
			t.Fatal(err)
		}
		yq, yd, ss := make([]byte, out), make([]float32, out/32), make([]float32, out/32)
		if err := k.Run(ops.NormPartQ8_0(), y, nw, yq, yd, ss); err != nil {
			t.Fatal(err)
		}
		lk, err := ops.DotAddNormQ8_0("Q4_K", sh)
		if err != nil {
			t.Fatal(err)
		}
		checkLocal(t, fmt.Sprint(sh), lk, out/32, func(o []any) []any { return []any{w, xq, xd, res, o[0], o[0], nw, o[1], o[2], o[3]} }, y, yq, yd, ss)
	}
	if _, err := ops.DotAddNormQ8_0("Q4_K", ops.DotShape{Rows: 3}); err == nil {
		t.Error("3 rows a group: no error")
	}
}

// The counted forms (kernel.BlockEpilogue) give the two kernels' bits in
// turn, their groups in order or not.
func TestDotThenBlockCounted(t *testing.T) {
	r := rand.New(rand.NewPCG(55, 56))
	const n, out = 512, 32 * 5
	wg, wu := gateUp(quant.Q4_K, n, out, r)
	xq, xd := partner(t, "Q8_K", opstest.Floats(n, 2, r))
	res, nw := opstest.Floats(out, 1, r), opstest.Floats(out, 1, r)
	// staged too (a counted fold keeps its producer's stages)
	for _, sh := range []ops.DotShape{{Unroll: 2}, {Rows: 2, Unroll: 2}, {Rows: 4}, {Rows: 2, Unroll: 2, Stage: 4608}} {
		sy, ay := make([]float32, out), make([]float32, out)
		if err := k.Run(ops.DotMatVec("SwiGLU", "Q4_K", sh), wg, wu, xq, xd, sy); err != nil {
			t.Fatal(err)
		}
		if err := k.Run(ops.DotMatVec("Add", "Q4_K", sh), wg, xq, xd, res, ay); err != nil {
			t.Fatal(err)
		}
		sq, sd := partner(t, "Q8_0", sy)
		aq, ad, ss := make([]byte, out), make([]float32, out/32), make([]float32, out/32)
		if err := k.Run(ops.NormPartQ8_0(), ay, nw, aq, ad, ss); err != nil {
			t.Fatal(err)
		}
		sk, err := ops.DotThenBlockCounted("SwiGLU", "Q4_K", sh)
		if err != nil {
			t.Fatal(err)
		}
		ak, err := ops.DotThenBlockCounted("Add", "Q4_K", sh)
		if err != nil {
			t.Fatal(err)
		}
		for seed := range uint64(3) {
			run := func(lk *k.Kernel, args ...any) {
				if seed == 0 {
					err = k.Run(lk, args...)
				} else {
					err = k.RunGroups(lk, seed, args...)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			gy, gq, gd := make([]float32, out), make([]byte, out), make([]float32, out/32)
			run(sk, wg, wu, xq, xd, gy, gy, gq, gd, make([]uint32, out/32))
			if firstDiff(f32Bits(gy), f32Bits(sy)) >= 0 || firstDiff(gq, sq) >= 0 || firstDiff(f32Bits(gd), f32Bits(sd)) >= 0 {
				t.Errorf("SwiGLU %v, order %d: not the two kernels' bits", sh, seed)
			}
			hy, hq, hd, hs := make([]float32, out), make([]byte, out), make([]float32, out/32), make([]float32, out/32)
			run(ak, wg, xq, xd, res, hy, hy, nw, hq, hd, hs, make([]uint32, out/32))
			if firstDiff(f32Bits(hy), f32Bits(ay)) >= 0 || firstDiff(hq, aq) >= 0 || firstDiff(f32Bits(hd), f32Bits(ad)) >= 0 || firstDiff(f32Bits(hs), f32Bits(ss)) >= 0 {
				t.Errorf("Add %v, order %d: not the two kernels' bits", sh, seed)
			}
		}
	}
	if _, err := ops.DotThenBlockCounted("Add", "Q4_K", ops.DotShape{Rows: 2, Threads: 64}); err == nil {
		t.Error("groups of 64: no error")
	}
}

// NormPartQ8_0 quantizes x·w as QuantizeQ8_0 quantizes it, bit for bit,
// and sums each block's squares of x; a mat-vec with DotShape.Norm over
// its output is the plain mat-vec's sums times RMSNorm's 1/rms (within
// f32 rounding of the sum of parts), in the plain, SwiGLU and Add forms.
func TestNormPartQ8_0(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	const n, out, eps = 2048, 8, 1e-5
	x, w := opstest.Floats(n, 3, r), opstest.Floats(n, 1, r)
	xw := make([]float32, n)
	var ss64 float64
	for j := range x {
		xw[j] = x[j] * w[j]
		ss64 += float64(float64(x[j]) * float64(x[j]))
	}
	wantQ, wantD := partner(t, "Q8_0", xw)
	xq, xd, ss := make([]byte, n), make([]float32, n/32), make([]float32, n/32)
	if err := k.Run(ops.NormPartQ8_0(), x, w, xq, xd, ss); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(xq, wantQ) || !slices.Equal(xd, wantD) {
		t.Fatal("x·w's quants or scales are not QuantizeQ8_0's")
	}
	for b, s := range ss {
		var want float64
		for j := 32 * b; j < 32*(b+1); j++ {
			want += float64(float64(x[j]) * float64(x[j]))
		}
		if math.Abs(float64(s)-want) > 1e-5*want {
			t.Errorf("block %d: sum of squares %v, want %v", b, s, want)
		}
	}
	scale := 1 / math.Sqrt(ss64/n+eps)
	for _, c := range []struct{ layout string }{{"Q4_KQ8_0"}, {"Q6_KAQ8_0"}} {
		typ := quant.Q4_K
		if c.layout == "Q6_KAQ8_0" {
			typ = quant.Q6_K
		}
		wg, wu := gateUp(typ, n, out, r)
		if typ == quant.Q6_K {
			wg, wu = repackedQ6_KA(t, wg), repackedQ6_KA(t, wu)
		}
		res := opstest.Floats(out, 1, r)
		for _, form := range []string{"", "SwiGLU", "Add"} {
			sh := ops.DotShape{Rows: 2, Unroll: 2}
			args := func(norm bool, y []float32) []any {
				a := []any{wg}
				if form == "SwiGLU" {
					a = append(a, wu)
				}
				a = append(a, xq, xd)
				if norm {
					a = append(a, ss, float32(eps))
				}
				if form == "Add" {
					a = append(a, res)
				}
				return append(a, y)
			}
			plain, normed := make([]float32, out), make([]float32, out)
			if err := k.Run(ops.DotMatVec(form, c.layout, sh), args(false, plain)...); err != nil {
				t.Fatal(err)
			}
			nsh := sh
			nsh.Norm = true
			if err := k.Run(ops.DotMatVec(form, c.layout, nsh), args(true, normed)...); err != nil {
				t.Fatal(err)
			}
			for o := range out {
				var want float64
				switch form {
				case "":
					want = float64(float64(plain[o]) * scale)
				case "Add":
					want = float64(res[o]) + float64((float64(plain[o])-float64(res[o]))*scale)
				case "SwiGLU":
					// plain is silu(g)·u of the unscaled sums: compare with
					// a run of the gate and up projections alone
					g, u := make([]float32, out), make([]float32, out)
					if err := k.Run(ops.DotMatVec("", c.layout, sh), wg, xq, xd, g); err != nil {
						t.Fatal(err)
					}
					if err := k.Run(ops.DotMatVec("", c.layout, sh), wu, xq, xd, u); err != nil {
						t.Fatal(err)
					}
					gs := float64(float64(g[o]) * scale)
					want = float64(gs / (1 + math.Exp(-gs)) * float64(u[o]) * scale)
				}
				if d := math.Abs(float64(normed[o]) - want); d > 1e-4*(math.Abs(want)+1e-3) {
					t.Errorf("%s %q row %d: %v, want %v", c.layout, form, o, normed[o], want)
				}
			}
		}
	}
}
