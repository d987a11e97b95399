package ops_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// The warp mat-vecs compute the serial MatVec's function (each value
// decoded with the same roundings) in the warp's order: equal up to f32
// summation error, on rows of several widths.
func TestMatVecWarp(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	serial := map[string]func() *k.Kernel{"F32": ops.MatVecF32, "F16": ops.MatVecF16, "BF16": ops.MatVecBF16}
	for _, d := range ops.Blocks() {
		serial[d.Name] = func() *k.Kernel { return ops.MatVec(d) }
	}
	for name, mk := range ops.WarpMatVecs() {
		typ := opstest.Type(name)
		for _, n := range []int{256, 2048, 4352} {
			const rows = 9
			var w []byte
			for i := 0; i < rows; i++ {
				w = append(w, opstest.Row(typ, n, nil, r)...)
			}
			x := opstest.Floats(n, 2, r)
			want, got := make([]float32, rows), make([]float32, rows)
			for i := range got {
				got[i] = float32(math.NaN())
			}
			if err := k.Run(serial[name](), w, x, want); err != nil {
				t.Fatal(err)
			}
			if err := k.Run(mk(), w, x, got); err != nil {
				t.Fatal(err)
			}
			var scale float64
			for i := 0; i < n; i++ {
				scale += math.Abs(float64(x[i]))
			}
			for i := range got {
				if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-5*scale) {
					t.Errorf("%s n=%d row %d: warp %v, serial %v", name, n, i, got[i], want[i])
				}
			}
		}
	}
}

// The prefill products equal the mat-vecs row by row, bit for bit:
// MatMulWarp the warp mat-vec's, MatMulRows the serial MatVec's, with a
// row count that leaves a partial group.
func TestMatMulRows(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const n, out, rows = 512, 5, 11
	for _, d := range ops.Blocks() {
		var w []byte
		for i := 0; i < out; i++ {
			w = append(w, opstest.Row(opstest.Type(d.Name), n, nil, r)...)
		}
		x := opstest.Floats(rows*n, 1, r)
		type form struct {
			mm, mv *k.Kernel
		}
		forms := []form{{ops.MatMulRows(d), ops.MatVec(d)}}
		for _, outs := range []int{1, ops.MatMulOuts, 4} {
			mw, ok := ops.MatMulWarpTile(d.Name, outs)
			if !ok {
				break
			}
			forms = append(forms, form{mw, ops.WarpMatVecs()[d.Name]()})
		}
		for _, f := range forms {
			y := make([]float32, rows*out)
			if err := k.Run(f.mm, w, x, y, n); err != nil {
				t.Fatal(err)
			}
			for row := 0; row < rows; row++ {
				want := make([]float32, out)
				if err := k.Run(f.mv, w, x[row*n:(row+1)*n], want); err != nil {
					t.Fatal(err)
				}
				for o := range want {
					if math.Float32bits(y[row*out+o]) != math.Float32bits(want[o]) {
						t.Fatalf("%s row %d out %d: %v, %s gives %v", f.mm.Name, row, o, y[row*out+o], f.mv.Name, want[o])
					}
				}
			}
		}
	}
}

// AttentionWarp2 gives Attention's bits, and the cooperative QuantRound
// and RMSNorm forms give their serial kernels' (RMSNorm to an f64 rounding).
func TestWarpFormsMatchSerial(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const hd, heads, kvHeads, ctx, pos = 64, 8, 2, 80, 70
	dim := kvHeads * hd
	q := opstest.Floats(heads*hd, 1, r)
	kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
	for i := range kc {
		kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
	}
	step := []int32{0, pos}
	want, got := make([]float32, len(q)), make([]float32, len(q))
	if err := k.Run(ops.Attention(), q, kc, vc, want, step, hd, heads, heads/kvHeads, dim, float32(0.125)); err != nil {
		t.Fatal(err)
	}
	sc := make([]float32, 2*heads*ctx)
	if err := k.Run(ops.AttentionWarp2(), q, kc, vc, got, step, sc, hd, heads, heads/kvHeads, dim, ctx, float32(0.125)); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("attention value %d: warp %v, serial %v", i, got[i], want[i])
		}
	}

	for _, mode := range []int{dsl.RopeNormal, dsl.RopeNeox} {
		for _, dims := range []int{64, 32} {
			const rhd, rheads = 64, 6
			x := opstest.Floats(2*rheads*rhd, 2, r)
			freqs := make([]float32, dims/2)
			for i := range freqs {
				freqs[i] = 1 + r.Float32()
			}
			a, b := make([]float32, len(x)), make([]float32, len(x))
			st := []int32{0, 1234}
			if err := k.Run(ops.RopePos(mode, dims), x, a, st, freqs, rhd, rheads, float32(0.8), float32(0.9)); err != nil {
				t.Fatal(err)
			}
			if err := k.Run(ops.RopePosWarp(mode, dims), x, b, st, freqs, rhd, rheads, float32(0.8), float32(0.9)); err != nil {
				t.Fatal(err)
			}
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("rope mode %d dims %d value %d: warp %v, serial %v", mode, dims, i, b[i], a[i])
				}
			}
		}
	}

	x := opstest.Floats(4096, 3, r)
	x[77] = -5 // a unique largest magnitude for Q8_K's first-max search
	for _, mk := range []func() *k.Kernel{ops.QuantRoundQ8_0, ops.QuantRoundQ8_K} {
		a, b := make([]float32, len(x)), make([]float32, len(x))
		if err := k.Run(mk(), x, a); err != nil {
			t.Fatal(err)
		}
		if err := k.Run(ops.QuantRoundWarp(mk()), x, b); err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s value %d: warp %v, serial %v", mk().Name, i, b[i], a[i])
			}
		}
	}
	w := opstest.Floats(len(x), 1, r)
	a, b := make([]float32, len(x)), make([]float32, len(x))
	if err := k.Run(ops.RMSNorm(true), x, w, a, float32(1e-5)); err != nil {
		t.Fatal(err)
	}
	if err := k.Run(ops.RMSNormCTA(true), x, w, b, float32(1e-5)); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if d := math.Abs(float64(a[i] - b[i])); d > 1e-6*math.Abs(float64(a[i])) {
			t.Fatalf("rmsnorm value %d: CTA %v, serial %v", i, b[i], a[i])
		}
	}
}

// ArgMaxCTA gives the first index of the maximum, ties included.
func TestArgMaxCTA(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 7, 256, 1000, 128256} {
		x := opstest.Floats(n, 1, r)
		want := 0
		if n > 3 { // a tie: the first of two maxima wins
			best := 0
			for i, v := range x {
				if v > x[best] {
					best = i
				}
			}
			x[n-1] = x[best]
			want = best
		}
		for i, v := range x {
			if v > x[want] {
				want = i
			}
		}
		y := []int32{-1}
		if err := k.Run(ops.ArgMaxCTA(), x, y); err != nil {
			t.Fatal(err)
		}
		if int(y[0]) != want {
			t.Fatalf("n=%d: argmax %d, want %d", n, y[0], want)
		}
	}
}

// The fused-store forms equal the mat-vec followed by the node they
// replace (AddF32 with the residual, SiLUF32), bit for bit.
func TestMatVecWarpStores(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const n, rows = 512, 9
	res := opstest.Floats(rows, 3, r)
	forms := []struct {
		name  string
		kerns map[string]func() *k.Kernel
		next  func(dot, y []float32) error // the separate node
		args  func(w []byte, x, y []float32) []any
	}{
		{"add", ops.WarpMatVecsAdd(),
			func(dot, y []float32) error { return k.Run(ops.AddF32(), res, dot, y) },
			func(w []byte, x, y []float32) []any { return []any{w, x, res, y} }},
		{"silu", ops.WarpMatVecsSiLU(),
			func(dot, y []float32) error { return k.Run(ops.SiLUF32(), dot, y) },
			func(w []byte, x, y []float32) []any { return []any{w, x, y} }},
	}
	for _, f := range forms {
		for name, mk := range f.kerns {
			var w []byte
			for i := 0; i < rows; i++ {
				w = append(w, opstest.Row(opstest.Type(name), n, nil, r)...)
			}
			x := opstest.Floats(n, 2, r)
			dot, want, got := make([]float32, rows), make([]float32, rows), make([]float32, rows)
			if err := k.Run(ops.WarpMatVecs()[name](), w, x, dot); err != nil {
				t.Fatal(err)
			}
			if err := f.next(dot, want); err != nil {
				t.Fatal(err)
			}
			if err := k.Run(mk(), f.args(w, x, got)...); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Errorf("%s %s row %d: fused %v, separate %v", f.name, name, i, got[i], want[i])
				}
			}
		}
	}
}

// RopeKVStore is RopePosWarp on q and on k, then KVStore, bit for bit,
// partial rotations included.
func TestRopeKVStore(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	const hd, qHeads, kvHeads, ctx, pos = 64, 8, 2, 6, 4
	for _, mode := range []int{dsl.RopeNormal, dsl.RopeNeox} {
		for _, dims := range []int{64, 32} {
			q, kx, v := opstest.Floats(qHeads*hd, 2, r), opstest.Floats(kvHeads*hd, 2, r), opstest.Floats(kvHeads*hd, 2, r)
			freqs := make([]float32, dims/2)
			for i := range freqs {
				freqs[i] = 1 + r.Float32()
			}
			st := []int32{0, pos}
			ts, fs := float32(0.8), float32(0.9)
			wantQ, kr := make([]float32, len(q)), make([]float32, len(kx))
			wantK, wantV := make([]uint16, ctx*len(kx)), make([]uint16, ctx*len(kx))
			rope := ops.RopePosWarp(mode, dims)
			if err := k.Run(rope, q, wantQ, st, freqs, hd, qHeads, ts, fs); err != nil {
				t.Fatal(err)
			}
			if err := k.Run(rope, kx, kr, st, freqs, hd, kvHeads, ts, fs); err != nil {
				t.Fatal(err)
			}
			if err := k.Run(ops.KVStore(), kr, v, wantK, wantV, st, kvHeads*hd); err != nil {
				t.Fatal(err)
			}
			gotQ, gotK, gotV := make([]float32, len(q)), make([]uint16, len(wantK)), make([]uint16, len(wantV))
			if err := k.Run(ops.RopeKVStore(mode, dims), q, kx, v, gotQ, gotK, gotV, st, freqs, hd, ts, fs); err != nil {
				t.Fatal(err)
			}
			for i := range wantQ {
				wantQ[i] = quant.F16ToF32(quant.F32ToF16(wantQ[i])) // as the attention reads it
				if math.Float32bits(gotQ[i]) != math.Float32bits(wantQ[i]) {
					t.Fatalf("mode %d dims %d q value %d: %v, rope %v", mode, dims, i, gotQ[i], wantQ[i])
				}
			}
			for i := range wantK {
				if gotK[i] != wantK[i] || gotV[i] != wantV[i] {
					t.Fatalf("mode %d dims %d cache value %d: k %#x v %#x, want %#x %#x", mode, dims, i, gotK[i], gotV[i], wantK[i], wantV[i])
				}
			}
		}
	}
}

// RopeKVStoreNorm is RMSNormRows over each head, then RopeKVStore, within
// f32 rounding (its sum of squares is a warp's tree, RMSNormRows' a
// CTA's): q within 1e-6, each cached half within one ulp.
func TestRopeKVStoreNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const hd, qHeads, kvHeads, ctx, pos = 128, 4, 2, 3, 2
	eps := float32(1e-6)
	for _, mode := range []int{dsl.RopeNormal, dsl.RopeNeox} {
		q, kx, v := opstest.Floats(qHeads*hd, 2, r), opstest.Floats(kvHeads*hd, 2, r), opstest.Floats(kvHeads*hd, 2, r)
		qw, kw := opstest.Floats(hd, 1, r), opstest.Floats(hd, 1, r)
		freqs := make([]float32, hd/2)
		for i := range freqs {
			freqs[i] = 1
		}
		st := []int32{0, pos}
		ts, fs := float32(0.9), float32(1)
		qn, kn := make([]float32, len(q)), make([]float32, len(kx))
		if err := k.Run(ops.RMSNormRows(true), q, qw, qn, eps, hd); err != nil {
			t.Fatal(err)
		}
		if err := k.Run(ops.RMSNormRows(true), kx, kw, kn, eps, hd); err != nil {
			t.Fatal(err)
		}
		wantQ, wantK, wantV := make([]float32, len(q)), make([]uint16, ctx*len(kx)), make([]uint16, ctx*len(kx))
		if err := k.Run(ops.RopeKVStore(mode, hd), qn, kn, v, wantQ, wantK, wantV, st, freqs, hd, ts, fs); err != nil {
			t.Fatal(err)
		}
		gotQ, gotK, gotV := make([]float32, len(q)), make([]uint16, len(wantK)), make([]uint16, len(wantV))
		if err := k.Run(ops.RopeKVStoreNorm(mode, hd), q, kx, v, qw, kw, gotQ, gotK, gotV, st, freqs, hd, eps, ts, fs); err != nil {
			t.Fatal(err)
		}
		for i := range wantQ {
			if d := math.Abs(float64(gotQ[i] - wantQ[i])); d > float64(1e-3*math.Abs(float64(wantQ[i])))+1e-6 {
				t.Fatalf("mode %d q value %d: %v, norm then rope %v", mode, i, gotQ[i], wantQ[i])
			}
		}
		for i := range wantK {
			dk, dv := int(gotK[i])-int(wantK[i]), int(gotV[i])-int(wantV[i])
			if dk < -1 || dk > 1 || dv != 0 {
				t.Fatalf("mode %d cache value %d: k %#x v %#x, want %#x %#x", mode, i, gotK[i], gotV[i], wantK[i], wantV[i])
			}
		}
		if wantK[pos*len(kx)] == 0 && wantK[pos*len(kx)+1] == 0 {
			t.Fatal("nothing cached at the position")
		}
	}
}

// ReadStream sums each piece's words, wrapping, and leaves the bytes past
// the last whole piece unread.
func TestReadStream(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct{ n, pieces int }{{16, 1}, {4096, 4}, {5000, 3}, {1 << 16, 7}} {
		w := make([]byte, c.n)
		for i := range w {
			w[i] = byte(r.Uint32())
		}
		y := make([]uint32, c.pieces)
		if err := k.Run(ops.ReadStream(), w, y); err != nil {
			t.Fatal(err)
		}
		piece := c.n / c.pieces / 16 * 16
		for p := range y {
			var want uint32
			for i := p * piece; i < (p+1)*piece; i += 4 {
				want += binary.LittleEndian.Uint32(w[i:])
			}
			if y[p] != want {
				t.Fatalf("%d bytes in %d pieces: piece %d sums to %#x, want %#x", c.n, c.pieces, p, y[p], want)
			}
		}
	}
}
