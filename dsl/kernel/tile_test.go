package kernel_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// tileKernel multiplies a rows×32 f32 x by an n×32 f16 w (one TileMMA) at
// element offset off of x, in one warp tile of 16×8.
func tileKernel() *k.Kernel {
	b := k.New("tile")
	x, w, y := b.Buffer("x", k.F32), b.Buffer("w", k.U16), b.Buffer("y", k.F32)
	off := b.Scalar("off", k.Int)
	b.ParallelFor("t", 0, 1, func(t k.Expr) {
		acc := b.NewTile("acc", 1, 1)
		b.TileMMA(acc, k.TileOperand{Buf: x, Off: off, Stride: k.I(k.TileK), Rows: k.I(3)},
			k.TileOperand{Buf: w, Off: k.I(0), Stride: k.I(k.TileK), Rows: k.I(2)})
		b.TileStore(acc, k.TileOperand{Buf: y, Off: k.I(0), Stride: k.I(8), Rows: k.I(3)}, k.I(2))
	})
	return b.MustBuild()
}

// The interpreter's tile: f16-rounded operands, rows past the last read the
// last again, only the bounded part stored, offsets held to TileAlign.
func TestTileInterpreted(t *testing.T) {
	x := make([]float32, 8+3*k.TileK)
	for i := range x {
		x[i] = 1 + float32(i%5)/3 // thirds: rounded by f16
	}
	w := make([]uint16, 2*k.TileK)
	for i := range w {
		w[i] = k.F32ToF16(float32(i%3) - 1)
	}
	y := make([]float32, 3*8)
	for i := range y {
		y[i] = -7
	}
	if err := k.Run(tileKernel(), x, w, y, 8); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		for j := range 8 {
			want := float32(-7)
			if j < 2 {
				want = 0
				for c := range k.TileK {
					want += float32(k.F16ToF32(k.F32ToF16(x[8+i*k.TileK+c])) * k.F16ToF32(w[j*k.TileK+c]))
				}
			}
			if y[i*8+j] != want {
				t.Fatalf("y[%d][%d] = %v, want %v", i, j, y[i*8+j], want)
			}
		}
	}
	if err := k.Run(tileKernel(), x, w, y, 4); err == nil || !strings.Contains(err.Error(), "not multiples") {
		t.Fatalf("a misaligned operand: %v", err)
	}
}

func TestTileBuildErrors(t *testing.T) {
	for name, build := range map[string]func(b *k.Builder){
		"outside the ParallelFor": func(b *k.Builder) { b.NewTile("a", 1, 1) },
		"too many pieces": func(b *k.Builder) {
			b.ParallelFor("t", 0, 1, func(k.Expr) { b.NewTile("a", 4, 8) })
		},
		"an I32 operand": func(b *k.Builder) {
			x := b.Buffer("x", k.I32)
			b.ParallelFor("t", 0, 1, func(k.Expr) {
				a := b.NewTile("a", 1, 1)
				op := k.TileOperand{Buf: x, Off: k.I(0), Stride: k.I(32), Rows: k.I(1)}
				b.TileMMA(a, op, op)
			})
		},
		"a store into U16": func(b *k.Builder) {
			y := b.Buffer("y", k.U16)
			b.ParallelFor("t", 0, 1, func(k.Expr) {
				a := b.NewTile("a", 1, 1)
				b.TileStore(a, k.TileOperand{Buf: y, Off: k.I(0), Stride: k.I(8), Rows: k.I(1)}, k.I(8))
			})
		},
	} {
		b := k.New("bad")
		build(b)
		if _, err := b.Build(); err == nil {
			t.Errorf("%s: built", name)
		}
	}
}

// A block product is refused in shapes no target renders, with operands of
// the wrong kinds or a Step, outside the ParallelFor, and beside a
// cooperative loop of another width.
func TestBlockBuildErrors(t *testing.T) {
	// product declares the buffers, then returns the product's statement
	product := func(b *k.Builder, sh k.BlockShape, ak, ck k.Kind, step k.Expr) func() {
		x, w, y := b.Buffer("x", ak), b.Buffer("w", ck), b.Buffer("y", k.F32)
		return func() {
			b.BlockMatMul(sh, k.TileOperand{Buf: x, Off: k.I(0), Stride: k.I(32), Rows: k.I(1), Step: step},
				k.TileOperand{Buf: w, Off: k.I(0), Stride: k.I(32), Rows: k.I(1)}, k.I(32),
				k.TileOperand{Buf: y, Off: k.I(0), Stride: k.I(8), Rows: k.I(1)}, k.I(8))
		}
	}
	good := k.BlockShape{WM: 2, WN: 2, M: 2, N: 4}
	inside := func(sh k.BlockShape, ak, ck k.Kind, step k.Expr) func(b *k.Builder) {
		return func(b *k.Builder) {
			p := product(b, sh, ak, ck, step)
			b.ParallelFor("t", 0, 1, func(k.Expr) { p() })
		}
	}
	ok := k.New("ok")
	inside(good, k.U16, k.U16, nil)(ok)
	if _, err := ok.Build(); err != nil {
		t.Fatalf("a good block product: %v", err)
	}
	for name, build := range map[string]func(b *k.Builder){
		"outside the ParallelFor": func(b *k.Builder) { product(b, good, k.U16, k.U16, nil)() },
		"nine warps":              inside(k.BlockShape{WM: 3, WN: 3, M: 1, N: 2}, k.U16, k.U16, nil),
		"an odd N":                inside(k.BlockShape{WM: 2, WN: 2, M: 2, N: 3}, k.U16, k.U16, nil),
		"uneven chunks":           inside(k.BlockShape{WM: 4, WN: 2, M: 1, N: 2}, k.U16, k.U16, nil),
		"an f32 weight operand":   inside(good, k.U16, k.F32, nil),
		"a Step":                  inside(good, k.U16, k.U16, k.I(2)),
		"a cooperative loop of another width": func(b *k.Builder) {
			p := product(b, good, k.F32, k.U16, nil)
			z := b.Buffer("z", k.F32)
			b.ParallelFor("t", 0, 1, func(k.Expr) {
				p()
				s := b.Acc("s", k.OpAdd, k.F(0))
				b.For("j", 0, 64, func(j k.Expr) { b.Fold(s, z.At(j)) })
				b.Store(z, k.I(0), s.Get())
			})
			b.Schedule("j", k.LoopSchedule{Threads: 32})
		},
	} {
		b := k.New("bad")
		build(b)
		kern, err := b.Build()
		if err == nil { // the schedule's widths are checked as it is applied
			_, err = k.Apply(kern, nil)
		}
		if err == nil {
			t.Errorf("%s: built", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// A block attention is refused in shapes no target renders, with caches
// not f16, an Int scale, or outside the ParallelFor.
func TestBlockAttentionBuildErrors(t *testing.T) {
	attn := func(sh k.AttnShape, ck k.Kind, scale k.Expr, inside bool) func(b *k.Builder) {
		return func(b *k.Builder) {
			q, kc, vc, y := b.Buffer("q", k.F32), b.Buffer("kc", ck), b.Buffer("vc", k.U16), b.Buffer("y", k.F32)
			st := func() {
				b.BlockAttention(sh, k.TileOperand{Buf: q, Off: k.I(0), Stride: k.I(64), Rows: k.I(1)},
					k.TileOperand{Buf: kc, Off: k.I(0), Stride: k.I(64)}, k.TileOperand{Buf: vc, Off: k.I(0), Stride: k.I(64)},
					k.TileOperand{Buf: y, Off: k.I(0), Stride: k.I(64)}, k.I(1), scale, nil)
			}
			if inside {
				b.ParallelFor("c", 0, 1, func(k.Expr) { st() })
			} else {
				st()
			}
		}
	}
	good := k.AttnShape{Warps: 4, HD: 64}
	ok := k.New("ok")
	attn(good, k.U16, k.F(0.125), true)(ok)
	if _, err := ok.Build(); err != nil {
		t.Fatalf("a good block attention: %v", err)
	}
	for name, build := range map[string]func(*k.Builder){
		"outside the ParallelFor": attn(good, k.U16, k.F(0.125), false),
		"nine warps":              attn(k.AttnShape{Warps: 9, HD: 64}, k.U16, k.F(0.125), true),
		"a head width of 40":      attn(k.AttnShape{Warps: 4, HD: 40}, k.U16, k.F(0.125), true),
		"f32 keys":                attn(good, k.F32, k.F(0.125), true),
		"an Int scale":            attn(good, k.U16, k.I(1), true),
	} {
		b := k.New("bad")
		build(b)
		if _, err := b.Build(); err == nil {
			t.Errorf("%s: built", name)
		}
	}
}
