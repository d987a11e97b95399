package graphs_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/jitllm/jitllm/graphs/reftest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/synth"
	"github.com/jitllm/jitllm/runtime/weights"
)

// tinyModel writes a 2-block F16 model of shape s and loads it.
func tinyModel(t *testing.T, s synth.Shape) *exec.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), s.Name+".gguf")
	if _, err := synth.Write(context.Background(), path, synth.Options{Shape: s, Type: synth.F16, Seed: 3, Layers: 2}); err != nil {
		t.Fatal(err)
	}
	src, err := weights.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// floats returns a weight's values by GGUF name (nil when absent).
func floats(t *testing.T, m *exec.Model, name string) []float64 {
	t.Helper()
	for _, w := range m.Weights {
		if w.GGUF != name {
			continue
		}
		n := 1
		for _, d := range w.Dims {
			n *= int(d)
		}
		f := make([]float32, n)
		if err := quant.Dequantize(w.Type, w.Data, f); err != nil {
			t.Fatal(err)
		}
		out := make([]float64, n)
		for i, v := range f {
			out[i] = float64(v)
		}
		return out
	}
	return nil
}

// reference is a float64 forward pass of a pre-norm rotary decoder written
// from the papers and the Hugging Face modeling code rather than from the
// dsl: it shares no code with the graphs, so a wrong graph and a right
// reference disagree. Rows of a matrix are its ggml rows (Dims[0] wide).
type reference struct {
	embd, heads, kvHeads, headDim, ff, vocab, layers int
	eps, base                                        float64
	neox, qkNorm                                     bool
	w                                                func(name string) []float64
	kCache, vCache                                   [][]float64 // per layer: positions × kvHeads·headDim
}

func (r *reference) matVec(w, x []float64, out int) []float64 {
	in := len(x)
	y := make([]float64, out)
	for j := range y {
		s := 0.0
		for i, xi := range x {
			s += w[j*in+i] * xi
		}
		y[j] = s
	}
	return y
}

func (r *reference) rmsNorm(x, w []float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	sc := 1 / math.Sqrt(ss/float64(len(x))+r.eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * sc * w[i]
	}
	return y
}

// rotate applies rotary embedding at pos to one head: pairs (2i, 2i+1) in
// GGUF's llama layout, halves (i, i+d/2) in NEOX's.
func (r *reference) rotate(h []float64, pos int) {
	d := len(h)
	for i := 0; i < d/2; i++ {
		theta := float64(pos) * math.Pow(r.base, -2*float64(i)/float64(d))
		a, b := 2*i, 2*i+1
		if r.neox {
			a, b = i, i+d/2
		}
		c, s := math.Cos(theta), math.Sin(theta)
		h[a], h[b] = h[a]*c-h[b]*s, h[a]*s+h[b]*c
	}
}

func (r *reference) step(tok int32, pos int) []float64 {
	x := append([]float64(nil), r.w("token_embd.weight")[int(tok)*r.embd:(int(tok)+1)*r.embd]...)
	hd, q, kv := r.headDim, r.heads*r.headDim, r.kvHeads*r.headDim
	for l := 0; l < r.layers; l++ {
		p := func(s string) string { return "blk." + string(rune('0'+l)) + "." + s + ".weight" }
		n := r.rmsNorm(x, r.w(p("attn_norm")))
		qv := r.matVec(r.w(p("attn_q")), n, q)
		kvv := r.matVec(r.w(p("attn_k")), n, kv)
		vv := r.matVec(r.w(p("attn_v")), n, kv)
		for h := 0; h < r.heads; h++ {
			head := qv[h*hd : (h+1)*hd]
			if r.qkNorm {
				copy(head, r.rmsNorm(head, r.w(p("attn_q_norm"))))
			}
			r.rotate(head, pos)
		}
		for h := 0; h < r.kvHeads; h++ {
			head := kvv[h*hd : (h+1)*hd]
			if r.qkNorm {
				copy(head, r.rmsNorm(head, r.w(p("attn_k_norm"))))
			}
			r.rotate(head, pos)
		}
		r.kCache[l] = append(r.kCache[l], kvv...)
		r.vCache[l] = append(r.vCache[l], vv...)
		att := make([]float64, q)
		for h := 0; h < r.heads; h++ {
			g := h / (r.heads / r.kvHeads)
			scores := make([]float64, pos+1)
			top := math.Inf(-1)
			for t := 0; t <= pos; t++ {
				s := 0.0
				for i := 0; i < hd; i++ {
					s += qv[h*hd+i] * r.kCache[l][t*kv+g*hd+i]
				}
				scores[t] = s / math.Sqrt(float64(hd))
				top = math.Max(top, scores[t])
			}
			sum := 0.0
			for t := range scores {
				scores[t] = math.Exp(scores[t] - top)
				sum += scores[t]
			}
			for t, e := range scores {
				for i := 0; i < hd; i++ {
					att[h*hd+i] += e / sum * r.vCache[l][t*kv+g*hd+i]
				}
			}
		}
		o := r.matVec(r.w(p("attn_output")), att, r.embd)
		for i := range x {
			x[i] += o[i]
		}
		n = r.rmsNorm(x, r.w(p("ffn_norm")))
		gate := r.matVec(r.w(p("ffn_gate")), n, r.ff)
		up := r.matVec(r.w(p("ffn_up")), n, r.ff)
		for i, g := range gate {
			gate[i] = g / (1 + math.Exp(-g)) * up[i]
		}
		d := r.matVec(r.w(p("ffn_down")), gate, r.embd)
		for i := range x {
			x[i] += d[i]
		}
	}
	n := r.rmsNorm(x, r.w("output_norm.weight"))
	out := r.w("output.weight")
	if out == nil {
		out = r.w("token_embd.weight")
	}
	return r.matVec(out, n, r.vocab)
}

func newReference(t *testing.T, m *exec.Model, s synth.Shape, neox bool) *reference {
	cache := map[string][]float64{}
	return &reference{
		embd: s.Embd, heads: s.Heads, kvHeads: s.KVHeads, headDim: s.HeadDim, ff: s.FF, vocab: s.Vocab, layers: 2,
		eps: float64(s.Eps), base: float64(s.RopeBase), neox: neox, qkNorm: s.QKNorm,
		kCache: make([][]float64, 2), vCache: make([][]float64, 2),
		w: func(name string) []float64 {
			v, ok := cache[name]
			if !ok {
				v = floats(t, m, name)
				cache[name] = v
			}
			return v
		},
	}
}

// TestGraphsMatchReference runs each family's graph on the CPU over a short
// prompt, every row's logits at once, against the float64 reference. llama
// is here to keep the reference honest: its graph is gated against
// llama.cpp's greedy tokens and logits (runtime/exec golden_test.go), so a
// reference that drifted would fail on it too. The bound allows for what the
// CPU path rounds: f16 activations into the f16 mat-vec and an f16 KV cache.
func TestGraphsMatchReference(t *testing.T) {
	for _, c := range []struct {
		like string
		neox bool
	}{{"llama-3.2-1b", false}, {"qwen3-0.6b", true}} {
		t.Run(c.like, func(t *testing.T) {
			s := reftest.Shape(t, c.like, 300)
			m := tinyModel(t, s)
			prompt := []int32{1, 17, 250, 4, 99, 3, 120, 7}
			r, err := exec.NewRunner(m, exec.Options{Threads: 2, MaxBatch: len(prompt), Context: 16, LogitsAll: true})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := r.Forward(prompt)
			if err != nil {
				t.Fatal(err)
			}
			ref := newReference(t, m, s, c.neox)
			var worst, scale float64
			for pos, tok := range prompt {
				want := ref.step(tok, pos)
				row := got[pos*s.Vocab : (pos+1)*s.Vocab]
				for i, w := range want {
					worst = math.Max(worst, math.Abs(float64(row[i])-w))
					scale = math.Max(scale, math.Abs(w))
				}
			}
			t.Logf("max |logit − reference| %.3g of max |logit| %.3g", worst, scale)
			if worst > 0.003*scale || scale == 0 {
				t.Errorf("logits differ from the reference by %.3g (max |logit| %.3g)", worst, scale)
			}
		})
	}
}
