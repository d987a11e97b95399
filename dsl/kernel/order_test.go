package kernel

import (
	"math"
	"strings"
	"testing"
)

// An Order is honoured by Run (from the default schedule) and by Apply, and
// computes exactly the partial sums, tree and tail it describes.
func TestOrderLanes(t *testing.T) {
	b := New("Sum")
	x := b.Buffer("x", F32)
	sum := b.Acc("sum", OpAdd, F(0))
	b.For("i", 0, x.Len(), func(i Expr) { b.Fold(sum, x.At(i).Mul(x.At(i))) })
	b.Return(sum.Get())
	b.Schedule("sum", LoopSchedule{Order: Order{Lanes: 4, LaneLoop: "i", LaneFused: true, Tree: TreeHalving}})
	k := b.MustBuild()
	xs := make([]float32, 11)
	for i := range xs {
		xs[i] = float32(math.Sqrt(float64(i) + 0.1))
	}
	fma := func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }
	var p [4]float32
	for i := 0; i < 8; i++ {
		p[i%4] = fma(xs[i], xs[i], p[i%4])
	}
	p[0], p[1] = p[0]+p[2], p[1]+p[3]
	want := float32(0) + (p[0] + p[1])
	for i := 8; i < 11; i++ {
		want += float32(xs[i] * xs[i])
	}
	got, err := Call(k, xs)
	if err != nil {
		t.Fatal(err)
	}
	if got.(float32) != want {
		t.Fatalf("Run: %v, want %v", got, want)
	}
	// Apply with only loop schedules keeps the kernel's Order; a zero Order
	// under the accumulator's name asks for the plain one.
	ak, err := Apply(k, Schedule{"i": {Unroll: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Call(ak, xs); got.(float32) != want {
		t.Fatalf("Apply: %v, want %v", got, want)
	}
	pk, _ := Apply(k, Schedule{"sum": {}})
	var plain float32
	for _, v := range xs {
		plain += float32(v * v)
	}
	if got, _ := Call(pk, xs); got.(float32) != plain {
		t.Fatalf("plain order: %v, want %v", got, plain)
	}
}

func TestOrderErrors(t *testing.T) {
	for _, c := range []struct {
		o    Order
		want string
	}{
		{Order{Lanes: 3, LaneLoop: "i", Tree: TreeHalving}, "halving tree of 3"},
		{Order{Lanes: 4, LaneLoop: "nope"}, "no lane loop"},
		{Order{Chunk: 4, ChunkLoop: "i"}, "no fold of an integer Sum"},
	} {
		b := New("Bad")
		x := b.Buffer("x", F32)
		sum := b.Acc("sum", OpAdd, F(0))
		b.For("i", 0, 8, func(i Expr) { b.Fold(sum, x.At(i)) })
		b.Return(sum.Get())
		b.Schedule("sum", LoopSchedule{Order: c.o})
		_, err := Call(b.MustBuild(), make([]float32, 8))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.want)
		}
	}
}
