package exec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/quant"
)

// attendGroup gives AttentionSeq's values bit for bit, over head sizes below,
// at and above the 64-lane block, grouped heads, two sequences, and
// positions from the first on.
func TestAttendGroupMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tab := f16tab()
	for _, c := range []struct{ hd, heads, kvHeads int }{{8, 8, 8}, {64, 4, 2}, {80, 2, 1}, {128, 4, 4}, {96, 6, 2}, {192, 2, 2}, {64, 32, 8}, {16, 8, 1}} {
		const ctx, seqs = 40, 2
		kvDim := c.kvHeads * c.hd
		kc := make([]uint16, seqs*ctx*kvDim)
		vc := make([]uint16, len(kc))
		for i := range kc {
			kc[i] = quant.F32ToF16(float32(r.NormFloat64() * 2))
			vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		rows := 12
		rowPos, rowSeq := make([]int32, rows), make([]int32, rows)
		for i := range rows {
			rowPos[i], rowSeq[i] = int32(r.IntN(ctx)), int32(r.IntN(seqs))
		}
		rowPos[0] = 0
		q := make([]float32, rows*c.heads*c.hd)
		for i := range q {
			q[i] = float32(r.NormFloat64() * 3)
		}
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		want := make([]float32, len(q))
		cpugen.AttentionSeq(q, kc, vc, want, rowPos, rowSeq, c.hd, c.heads, c.heads/c.kvHeads, kvDim, ctx, 0, scale)
		got := make([]float32, len(q))
		g := c.heads / c.kvHeads
		for tt := 0; tt < rows*c.kvHeads; tt++ {
			row := tt / c.kvHeads
			off := int(rowSeq[row])*ctx*kvDim + tt%c.kvHeads*c.hd
			attendGroup(tab, q[tt*g*c.hd:(tt+1)*g*c.hd], kc, vc, got[tt*g*c.hd:(tt+1)*g*c.hd], g, int(rowPos[row]), off, kvDim, scale)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("hd %d: value %d is %v, AttentionSeq %v", c.hd, i, got[i], want[i])
			}
		}
	}
}

// The per-row rope tables give RopeNormalSeq's and RopeNeoxSeq's values:
// the graph is stepped node by node and each rope node's output checked
// before a later node can reuse its input's buffer.
func TestRoPEMatchesGenerated(t *testing.T) {
	for _, model := range []string{"stories260K.gguf", "llama-2-tiny-random.gguf", "synthetic/tiny256-Q8_0.gguf"} {
		r := load(t, model, Options{})
		prompt := []int32{1, 20, 30, 40, 50, 60}
		n := len(prompt)
		copy(r.tokens, prompt)
		for i := range n {
			r.rowSeq[i], r.rowPos[i] = 0, int32(i+3) // as if three positions were cached
		}
		r.nRows, r.outRow, r.qSrc = n, n-1, -1
		checked := 0
		for i, st := range r.steps {
			st()
			nd := r.m.Graph.Nodes[i]
			if nd.Op != dsl.OpRoPE {
				continue
			}
			p := nd.Rope
			a, y := r.bufs[nd.In[0]], r.bufs[i]
			freqs, _ := r.vector(p.FreqsW)
			if freqs == nil {
				freqs = make([]float32, p.Dims/2)
				for j := range freqs {
					freqs[j] = 1
				}
			}
			ts := float32(math.Pow(float64(p.Base), -2.0/float64(p.Dims)))
			rope := cpugen.RopeNormalSeq
			if p.Mode == dsl.RopeNeox {
				rope = cpugen.RopeNeoxSeq
			}
			w := p.Heads * p.HeadDim
			want := make([]float32, w)
			for row := range n {
				rope(a[row*nd.Cols:row*nd.Cols+w], want, r.rowPos[row:row+1], freqs, p.HeadDim, p.Heads, p.Dims, ts, p.FreqScale)
				for j, v := range want {
					if math.Float32bits(y[row*nd.Cols+j]) != math.Float32bits(v) {
						t.Fatalf("%s node %d row %d value %d: %v, generated %v", model, i, row, j, y[row*nd.Cols+j], v)
					}
				}
			}
			checked++
		}
		if checked == 0 {
			t.Fatalf("%s: no rope node", model)
		}
	}
}

func BenchmarkAttendGroup(b *testing.B) {
	const hd, pos, kvDim, g = 64, 255, 512, 4
	r := rand.New(rand.NewPCG(1, 1))
	kc, vc := make([]uint16, (pos+1)*kvDim), make([]uint16, (pos+1)*kvDim)
	for i := range kc {
		kc[i], vc[i] = quant.F32ToF16(float32(r.NormFloat64())), quant.F32ToF16(float32(r.NormFloat64()))
	}
	q, y := make([]float32, g*hd), make([]float32, g*hd)
	for i := range q {
		q[i] = float32(r.NormFloat64())
	}
	tab := f16tab()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		attendGroup(tab, q, kc, vc, y, g, pos, 64, kvDim, 0.125)
	}
	b.ReportMetric(float64(b.N)*g*(pos+1)*hd*2/b.Elapsed().Seconds()/1e9, "Gelem/s")
}

func BenchmarkAttentionSeqGenerated(b *testing.B) {
	const hd, pos, kvDim = 64, 255, 512
	r := rand.New(rand.NewPCG(1, 1))
	kc, vc := make([]uint16, (pos+1)*kvDim), make([]uint16, (pos+1)*kvDim)
	for i := range kc {
		kc[i], vc[i] = quant.F32ToF16(float32(r.NormFloat64())), quant.F32ToF16(float32(r.NormFloat64()))
	}
	q, y := make([]float32, hd), make([]float32, hd)
	for i := range q {
		q[i] = float32(r.NormFloat64())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpugen.AttentionSeq(q, kc, vc, y, []int32{pos}, []int32{0}, hd, 1, 1, kvDim, 1<<20, 0, 0.125)
	}
	b.ReportMetric(float64(b.N)*(pos+1)*hd*2/b.Elapsed().Seconds()/1e9, "Gelem/s")
}
