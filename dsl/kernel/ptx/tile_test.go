package ptx_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// A tile kernel renders as mma.sync on sm_80 and later, a warp per grid
// iteration, and is refused before sm_80.
func TestTileRenders(t *testing.T) {
	b := k.New("tile")
	x, w, y := b.Buffer("x", k.F32), b.Buffer("w", k.U16), b.Buffer("y", k.F32)
	b.ParallelFor("t", 0, 4, func(t k.Expr) {
		acc := b.NewTile("acc", 2, 3)
		b.TileMMA(acc, k.TileOperand{Buf: x, Off: t.Mul(k.TileK), Stride: k.I(k.TileK), Rows: k.I(32)},
			k.TileOperand{Buf: w, Off: k.I(0), Stride: k.I(k.TileK), Rows: k.I(24)})
		b.TileStore(acc, k.TileOperand{Buf: y, Off: k.I(0), Stride: k.I(24), Rows: k.I(32)}, k.I(24))
	})
	kern := b.MustBuild()
	src, err := ptx.Render(kern, ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	// 2×3 pieces, two k steps; 2×2 f32 row loads of x, 3 f16 row loads of w;
	// 2·3·4 predicated stores
	for ins, want := range map[string]int{"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": 12,
		"ld.global.v4.f32": 8, "ld.global.v4.b32": 3, "cvt.rn.f16x2.f32": 16, "st.global.f32": 24} {
		if got := strings.Count(src, ins); got != want {
			t.Errorf("%s: %d, want %d", ins, got, want)
		}
	}
	l, err := ptx.Plan(kern, ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	if l.Group != 32 {
		t.Errorf("a grid iteration runs on %d threads, want a warp", l.Group)
	}
	if _, err := ptx.Render(kern, ptx.Target{SM: 75}); err == nil || !strings.Contains(err.Error(), "sm_80") {
		t.Errorf("sm_75: %v", err)
	}
}
