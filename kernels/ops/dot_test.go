package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

func dotCall(t *testing.T, k *kernel.Kernel, args ...any) float32 {
	t.Helper()
	v, err := kernel.Call(k, args...)
	if err != nil {
		t.Fatal(err)
	}
	return v.(float32)
}

// Every dot kernel, interpreted, is its kernels/quant function bit for bit:
// the generic order for VecDot, the x86 Orders for the hand-written
// variants. Enough rows that one wrong rounding anywhere shows.
func TestDotMatchesQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, d := range ops.Dots() {
		ref := opstest.DotReference(d)
		for row := 0; row < 40; row++ {
			n := d.QK * max(1, 16/d.QK) * (1 + r.IntN(40))
			a := opstest.DotArgs(d, n, r)
			got, want := dotCall(t, d.Kernel, a...), ref(n, a[1].([]byte), a[2].([]byte))
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s n=%d: %v (%#x), quant says %v (%#x)", d.Kernel.Name, n, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}

// The orders are schedules, not rewrites of the value: each variant is
// within float error of the exact dot product, and the Orders do change
// bits (else the test above could not tell them apart).
func TestOrdersDiffer(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	generic := map[string]*kernel.Kernel{}
	for _, d := range ops.Dots() {
		if _, ok := opstest.Variants[d.Kernel.Name]; !ok {
			generic[d.W] = d.Kernel
		}
	}
	for _, d := range ops.Dots() {
		g := generic[d.W]
		if g.Name == d.Kernel.Name {
			continue
		}
		differ := false
		for row := 0; row < 20 && !differ; row++ {
			a := opstest.DotArgs(d, 1024, r)
			x, y := dotCall(t, d.Kernel, a...), dotCall(t, g, a...)
			if math.Abs(float64(x)-float64(y)) > 1e-4*(1+math.Abs(float64(y))) {
				t.Fatalf("%s: %v, generic order %v", d.Kernel.Name, x, y)
			}
			differ = x != y
		}
		if !differ {
			t.Errorf("%s: same bits as %s on every row: the Order did nothing", d.Kernel.Name, g.Name)
		}
	}
}

// Quant describes the same layout as Decode: Decode's value j is Quant(j)
// times the block scale (and plus the min, for the _1 types).
func TestQuantIsDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, d := range ops.Blocks() {
		if d.Quant == nil {
			continue
		}
		b := kernel.New("Q" + d.Name)
		src, dst := b.Buffer("src", kernel.U8), b.Buffer("dst", kernel.I32)
		b.For("j", 0, d.QK, func(j kernel.Expr) { b.Store(dst, j, d.Quant(src, j)) })
		qk := b.MustBuild()
		blk := opstest.Blocks(d, 1, r)
		q, v := make([]int32, d.QK), make([]float32, d.QK)
		run(t, qk, blk, q)
		run(t, ops.Dequant(d), blk, v)
		dsc := quant.F16ToF32(uint16(blk[0]) | uint16(blk[1])<<8)
		var m float32
		if d.Name == "Q4_1" || d.Name == "Q5_1" {
			m = quant.F16ToF32(uint16(blk[2]) | uint16(blk[3])<<8)
		}
		for j := range q {
			if want := float32(float32(q[j])*dsc) + m; math.Float32bits(want) != math.Float32bits(v[j]) {
				t.Fatalf("%s [%d]: quant %d gives %v, Decode %v", d.Name, j, q[j], want, v[j])
			}
		}
	}
}
