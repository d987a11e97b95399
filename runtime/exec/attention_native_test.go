package exec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// attendGroupNative gives attendGroup's values bit for bit for every
// registered native build, over head sizes with and without a dot tail,
// positions across several blocks, and extreme cache values.
func TestAttendGroupNativeMatches(t *testing.T) {
	ks := cpukern.AllAttention()
	if len(ks) == 0 {
		t.Skip("no native attention registered on this CPU")
	}
	r := rand.New(rand.NewPCG(5, 6))
	tab := f16tab()
	sc := new(attnScratch)
	for _, c := range []struct{ hd, g int }{{64, 4}, {128, 2}, {80, 2}, {96, 3}, {256, 4}, {8, 8}, {40, 1}} {
		for _, extremes := range []bool{false, true} {
			const kvHeads, ctx = 2, 150
			kvDim := kvHeads * c.hd
			kc, vc := make([]uint16, ctx*kvDim), make([]uint16, ctx*kvDim)
			for i := range kc {
				kc[i] = quant.F32ToF16(float32(r.NormFloat64() * 2))
				vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
				if extremes && r.IntN(50) == 0 {
					kc[i] = []uint16{0x7bff, 0xfbff, 0x0001, 0x8000, 0x7c00}[r.IntN(5)]
					vc[i] = []uint16{0x7bff, 0xfbff, 0x0001, 0x8003, 0x7c00}[r.IntN(5)]
				}
			}
			q := make([]float32, c.g*c.hd)
			for i := range q {
				q[i] = float32(r.NormFloat64() * 3)
			}
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			for _, pos := range []int{0, 1, 63, 64, 100, ctx - 1} {
				off := r.IntN(kvHeads) * c.hd
				want := make([]float32, len(q))
				attendGroup(tab, q, kc, vc, want, c.g, pos, off, kvDim, scale)
				for _, k := range ks {
					if c.hd%8 != 0 {
						continue
					}
					got := make([]float32, len(q))
					attendGroupNative(&k, sc, tab, q, kc, vc, got, c.g, pos, off, kvDim, scale)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
							t.Fatalf("%s hd %d g %d pos %d extremes %v: value %d is %v, attendGroup %v", k.ISA, c.hd, c.g, pos, extremes, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestAttentionISA(t *testing.T) {
	nk, ok := cpukern.LookupAttention()
	want := "go"
	if ok {
		want = nk.ISA
	}
	if got := AttentionISA(64); got != want {
		t.Errorf("AttentionISA(64) = %q, want %q", got, want)
	}
	if got := AttentionISA(12); got != "go" {
		t.Errorf("AttentionISA(12) = %q, want go (not a multiple of 8)", got)
	}
}

func TestAttendGroupNativeNoAllocs(t *testing.T) {
	nk, ok := nativeAttention(64)
	if !ok {
		t.Skip("no native attention registered on this CPU")
	}
	const hd, g, pos, kvDim = 64, 4, 200, 512
	kc, vc := make([]uint16, (pos+1)*kvDim), make([]uint16, (pos+1)*kvDim)
	q, y := make([]float32, g*hd), make([]float32, g*hd)
	tab, sc := f16tab(), new(attnScratch)
	if n := testing.AllocsPerRun(20, func() {
		attendGroupNative(&nk, sc, tab, q, kc, vc, y, g, pos, 0, kvDim, 0.125)
	}); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}

// BenchmarkAttentionPrefill512 is one layer's attention of a 512-row
// prefill (headDim 64, 32 heads, 8 KV heads: each row attends positions
// 0..row), one thread, the Go loops and the native ones.
func BenchmarkAttentionPrefill512(b *testing.B) { benchAttention(b, false) }

// BenchmarkAttentionDecode512 is the last row alone: one decode step at
// position 511.
func BenchmarkAttentionDecode512(b *testing.B) { benchAttention(b, true) }

func benchAttention(b *testing.B, decode bool) {
	const hd, heads, kvHeads, rows = 64, 32, 8, 512
	g, kvDim := heads/kvHeads, kvHeads*hd
	r := rand.New(rand.NewPCG(1, 1))
	kc, vc := make([]uint16, rows*kvDim), make([]uint16, rows*kvDim)
	for i := range kc {
		kc[i], vc[i] = quant.F32ToF16(float32(r.NormFloat64())), quant.F32ToF16(float32(r.NormFloat64()))
	}
	q, y := make([]float32, rows*heads*hd), make([]float32, rows*heads*hd)
	for i := range q {
		q[i] = float32(r.NormFloat64())
	}
	tab, sc := f16tab(), new(attnScratch)
	nk, native := nativeAttention(hd)
	gv := g * hd
	t0 := 0
	if decode {
		t0 = (rows - 1) * kvHeads // the last row only
	}
	for _, impl := range []string{"go", "native"} {
		b.Run(impl, func(b *testing.B) {
			if impl == "native" && !native {
				b.Skip("no native attention registered on this CPU")
			}
			for b.Loop() {
				for t := t0; t < rows*kvHeads; t++ {
					row, off := t/kvHeads, t%kvHeads*hd
					if impl == "native" {
						attendGroupNative(&nk, sc, tab, q[t*gv:(t+1)*gv], kc, vc, y[t*gv:(t+1)*gv], g, row, off, kvDim, 0.125)
					} else {
						attendGroup(tab, q[t*gv:(t+1)*gv], kc, vc, y[t*gv:(t+1)*gv], g, row, off, kvDim, 0.125)
					}
				}
			}
		})
	}
}
