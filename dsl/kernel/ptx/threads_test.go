package ptx

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
)

var shflDist = regexp.MustCompile(`shfl\.sync\.bfly\.b32 %[a-z]+\d+, %[a-z]+\d+, (\d+), 31, %r\d+;`)

// groupSum is y[r] = Σ_i x[r·n+i] with loop i split over w threads.
func groupSum(w int) *kernel.Kernel {
	b := kernel.New("GroupSum")
	x, y := b.Buffer("x", kernel.F32), b.Buffer("y", kernel.F32)
	n := b.Scalar("n", kernel.Int)
	b.ParallelFor("r", 0, y.Len(), func(r kernel.Expr) {
		s := b.Acc("s", kernel.OpAdd, kernel.F(0))
		b.For("i", 0, n, func(i kernel.Expr) { b.Fold(s, x.At(r.Mul(n).Add(i))) })
		b.Store(y, r, s.Get())
	})
	b.Schedule("i", kernel.LoopSchedule{Threads: w})
	return b.MustBuild()
}

func TestRenderThreads(t *testing.T) {
	tg := Target{SM: 90}
	cases := []struct {
		k        *kernel.Kernel
		group    int
		dists    string // shuffle distances in order
		shared   bool
		grid     bool
		perGroup int // Threads for 10 grid iterations
	}{
		{groupSum(8), 8, "4 2 1", false, true, 80},
		{ops.MatVecWarpQ4_K(), 32, "16 8 4 2 1", false, true, 320},
		// an f64 sum: two shuffles a step
		{ops.RMSNormCTA(true), 256, "16 16 8 8 4 4 2 2 1 1", true, false, 256},
	}
	for _, c := range cases {
		src, err := Render(c.k, tg)
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, src, []*kernel.Kernel{c.k}, 90)
		var d []string
		for _, m := range shflDist.FindAllStringSubmatch(src, -1) {
			d = append(d, m[1])
		}
		if got := strings.Join(d, " "); got != c.dists {
			t.Errorf("%s: shuffle distances %q, want %q", c.k.Name, got, c.dists)
		}
		if strings.Contains(src, ".shared") != c.shared || strings.Contains(src, "bar.sync 0") != c.shared {
			t.Errorf("%s: shared scratch and CTA barriers present: %v, want %v", c.k.Name, strings.Contains(src, ".shared"), c.shared)
		}
		l, err := Plan(c.k, tg)
		if err != nil {
			t.Fatal(err)
		}
		if l.Group != c.group || (l.Loop != "") != c.grid {
			t.Errorf("%s: launch %+v, want group %d, grid %v", c.k.Name, l, c.group, c.grid)
		}
	}
	// the group of 8 has a mask of its own 8 lanes; a warp's is all of them
	if src, _ := Render(groupSum(8), tg); !strings.Contains(src, "mov.b32 %r") || !strings.Contains(src, ", 255;") {
		t.Errorf("group of 8: no 8-lane member mask")
	}
	n, err := Threads(groupSum(8), tg, Elems(640), Elems(10), 64)
	if err != nil || n != 80 {
		t.Errorf("Threads of 10 rows in groups of 8: %d, %v", n, err)
	}
	n, err = Threads(ops.RMSNormCTA(true), tg, Elems(2048), Elems(2048), Elems(2048), float32(1e-5))
	if err != nil || n != 256 {
		t.Errorf("Threads of a one-CTA kernel: %d, %v", n, err)
	}
	// a cooperative loop that stores ends with a warp barrier
	if src, _ := Render(ops.AttentionWarp2(), tg); !strings.Contains(src, "bar.warp.sync %r") {
		t.Errorf("AttentionWarp2: no warp barrier after its storing score loop")
	}
	// an aligned load is one access
	src, err := Render(ops.MatVecWarpQ4_K(), tg)
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(src, "ld.global.u32"); c != 4 {
		t.Errorf("MatVecWarpQ4_K: %d ld.global.u32, want its 4 aligned quant loads", c)
	}
}
