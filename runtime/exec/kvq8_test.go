package exec

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
)

// quant.QuantizeQ8_0Split gives kernels/ops' QuantizeQ8_0 bits (the query's Q8_0 as
// the cache's attention kernel reads it), ties and zero blocks included.
func TestQuantizeQ8_0MatchesKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 32*40)
	for i := range x {
		x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(12)-6))
	}
	clear(x[64:96])                                           // a zero block
	for i, v := range []float32{127, 0.5, -1.5, 2.5, -63.5} { // exact halves at id = 1
		x[96+i] = v
	}
	wq, wd := make([]byte, len(x)), make([]float32, len(x)/32)
	if err := kernel.Run(ops.QuantizeQ8_0(), x, wq, wd); err != nil {
		t.Fatal(err)
	}
	gq, gd := make([]byte, len(x)), make([]float32, len(x)/32)
	quant.QuantizeQ8_0Split(x, gq, gd)
	for i := range wq {
		if gq[i] != wq[i] {
			t.Fatalf("quant %d: %d, kernel %d", i, int8(gq[i]), int8(wq[i]))
		}
	}
	for i := range wd {
		if math.Float32bits(gd[i]) != math.Float32bits(wd[i]) {
			t.Fatalf("scale %d: %v, kernel %v", i, gd[i], wd[i])
		}
	}
}

func TestKVTypeRefused(t *testing.T) {
	m := openModel(t, "stories260K.gguf")
	if _, err := NewRunner(m, Options{KVType: "q4_0"}); err == nil || !strings.Contains(err.Error(), `"q4_0"`) || !strings.Contains(err.Error(), KVTypes) {
		t.Errorf("unknown cache type: %v", err)
	}
	// stories260K's heads are 8 values: no whole q8_0 block
	if _, err := NewRunner(m, Options{KVType: KVQ8_0}); err == nil || !strings.Contains(err.Error(), "head dim") || !strings.Contains(err.Error(), "is 8") {
		t.Errorf("q8_0 on head dim 8: %v", err)
	}
	for _, ok := range []string{"", KVF16} {
		r, err := NewRunner(m, Options{KVType: ok, Context: 8})
		if err != nil {
			t.Fatalf("KVType %q: %v", ok, err)
		}
		if l := r.KVLayout(); l.Type != KVF16 {
			t.Errorf("KVType %q: layout type %q", ok, l.Type)
		}
		r.Close()
	}
}

// refAttention is softmax attention in float64 over a step's rows from an
// empty cache (row r attends to rows 0..r), each query, key and value head
// first passed through round.
func refAttention(q, k, v []float32, rows int, p dsl.AttnParams, round func([]float32) []float32) []float64 {
	hd, kvDim := p.HeadDim, p.KVHeads*p.HeadDim
	out := make([]float64, rows*p.Heads*hd)
	for row := range rows {
		for h := range p.Heads {
			t := row*p.Heads + h
			qh, off := round(q[t*hd:(t+1)*hd]), h/(p.Heads/p.KVHeads)*hd
			s := make([]float64, row+1)
			top := math.Inf(-1)
			for j := range s {
				kj := round(k[j*kvDim+off : j*kvDim+off+hd])
				for d := range hd {
					s[j] += float64(float64(qh[d]) * float64(kj[d]))
				}
				s[j] *= float64(p.Scale)
				top = max(top, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - top)
				sum += s[j]
			}
			for j := range s {
				vj := round(v[j*kvDim+off : j*kvDim+off+hd])
				for d := range hd {
					out[t*hd+d] += float64(s[j]*float64(vj[d])) / sum
				}
			}
		}
	}
	return out
}

// q8Round is x quantized to Q8_0 blocks (the x86 rounding) and decoded.
func q8Round(x []float32) []float32 {
	b := make([]byte, len(x)/32*34)
	if err := quant.QuantizeRowX86(quant.Q8_0, x, b); err != nil {
		panic(err)
	}
	y := make([]float32, len(x))
	if err := quant.Dequantize(quant.Q8_0, b, y); err != nil {
		panic(err)
	}
	return y
}

// Every attention node of a q8_0 runner computes attention over the
// Q8_0-rounded queries, keys and values up to f32 rounding: the cache rows
// are where the kernels read them. The graph is stepped node by node so
// each node's inputs are read before a later node reuses their buffers.
func TestAttentionQ8MatchesReference(t *testing.T) {
	r := load(t, "synthetic/tiny256-Q4_K_M.gguf", Options{Context: 64, KVType: KVQ8_0})
	prompt := []int32{1, 403, 407, 261, 378, 432, 383, 17, 99, 5, 6, 7, 8, 9, 10, 11, 12}
	n := len(prompt)
	copy(r.tokens, prompt)
	for i := range n {
		r.rowSeq[i], r.rowPos[i] = 0, int32(i)
	}
	r.nRows, r.outRow, r.qSrc = n, n-1, -1
	checked := 0
	for i, st := range r.steps {
		nd := r.m.Graph.Nodes[i]
		if nd.Op != dsl.OpAttention {
			st()
			continue
		}
		w := nd.Cols
		q := append([]float32(nil), r.bufs[nd.In[0]][:n*w]...)
		k := append([]float32(nil), r.bufs[nd.In[1]][:n*nd.Attn.KVHeads*nd.Attn.HeadDim]...)
		v := append([]float32(nil), r.bufs[nd.In[2]][:n*nd.Attn.KVHeads*nd.Attn.HeadDim]...)
		st()
		want := refAttention(q, k, v, n, nd.Attn, q8Round)
		for j, y := range r.bufs[i][:n*w] {
			if d := math.Abs(float64(y) - want[j]); d > 1e-4*max(1, math.Abs(want[j])) {
				t.Fatalf("layer %d value %d: %g, reference %g", nd.Layer, j, y, want[j])
			}
		}
		checked++
	}
	if checked != r.m.Graph.Layers {
		t.Fatalf("%d attention nodes checked of %d layers", checked, r.m.Graph.Layers)
	}
}

// A q8_0 cache moves the logits of tiny256 by a few percent of their
// spread, as llama.cpp's q8_0 weights of the same model do (its random
// weights give attention scores up to |s| ≈ 44, so a score's 8-bit rounding
// shifts a head's weights visibly: mean |Δlogit| 0.12-0.22 against the f16
// cache, 0.19-0.24 between the F16 and Q8_0 weights with an f16 cache).
// Greedy decoding agrees with the f16 cache's for the first 16 steps here,
// and teacher-forced (both fed the f16 runner's choices) on most steps.
func TestKVQ8CloseToF16(t *testing.T) {
	const model, steps = "synthetic/tiny256-Q4_K_M.gguf", 32
	prompt := []int32{1, 403, 407, 261, 378, 432, 383, 17, 99}
	f16 := load(t, model, Options{Context: 64})
	q8 := load(t, model, Options{Context: 64, KVType: KVQ8_0})
	// free-running greedy
	a, b := greedy(t, f16, prompt, 16, -1, nil), greedy(t, q8, prompt, 16, -1, nil)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("greedy step %d: q8_0 chose %d, f16 %d (%v vs %v)", i, b[i], a[i], b, a)
		}
	}
	// teacher-forced
	f16.Truncate(0)
	q8.Truncate(0)
	la, lb := forward(t, f16, prompt), forward(t, q8, prompt)
	agree, total := 0, 0.0
	for step := range steps {
		var sum, worst float64
		for i := range la {
			d := math.Abs(float64(la[i] - lb[i]))
			sum, worst = sum+d, max(worst, d)
		}
		// measured: at most 0.43 on average and 1.75 at most a step, 0.2 over all
		if mean := sum / float64(len(la)); mean > 0.6 || worst > 3 {
			t.Fatalf("step %d: logits differ by %.3g on average, %.3g at most", step, mean, worst)
		}
		total += sum / float64(len(la))
		tok := argmax(la)
		if argmax(lb) == tok {
			agree++
		}
		la, lb = forward(t, f16, []int32{tok}), forward(t, q8, []int32{tok})
	}
	if total/steps > 0.3 || agree < steps*7/8 {
		t.Fatalf("logits differ by %.3g on average; top tokens agree on %d of %d steps", total/steps, agree, steps)
	}
}

func forward(t *testing.T, r *Runner, toks []int32) []float32 {
	t.Helper()
	out, err := r.Forward(toks)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), out...)
}

// A q8_0 position takes 34 bytes a 32 values of K and of V (against 64 in
// f16), and SaveSeq writes each K and V row as ggml's block_q8_0s.
func TestKVQ8Layout(t *testing.T) {
	const model = "synthetic/tiny256-Q4_K_M.gguf"
	f16 := load(t, model, Options{Context: 16, Sequences: 2})
	q8 := load(t, model, Options{Context: 16, Sequences: 2, KVType: KVQ8_0})
	lf, lq := f16.KVLayout(), q8.KVLayout()
	if lq.Type != KVQ8_0 || lf.Equal(lq) || !lq.Equal(KVLayout{Dims: lf.Dims, Type: KVQ8_0}) || !lf.Equal(KVLayout{Dims: lf.Dims}) {
		t.Fatalf("layouts %+v and %+v", lf, lq)
	}
	var values int
	for _, d := range lq.Dims {
		values += 2 * d
	}
	if lf.BytesPerToken() != 2*values || lq.BytesPerToken() != values/32*34 {
		t.Fatalf("%d values a position: %d bytes in f16, %d in q8_0", values, lf.BytesPerToken(), lq.BytesPerToken())
	}
	if f, q := f16.KVBytes(), q8.KVBytes(); q*64 != f*34 {
		t.Fatalf("KVBytes %d in f16, %d in q8_0", f, q)
	}
	if _, err := q8.ForwardBatch(Batch{Tokens: []int32{1, 2, 3, 4, 5}, Seq: []int32{1, 1, 1, 1, 1}, Logits: 1}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3*lq.BytesPerToken())
	if err := q8.SaveSeq(1, 3, buf); err != nil {
		t.Fatal(err)
	}
	kv, ctx := q8.kv[0], q8.Context()
	at := 1 * ctx * kv.dim     // sequence 1's first value
	rowV := 3 * lq.RowBytes(0) // layer 0's V rows follow its 3 K rows
	if binary.LittleEndian.Uint16(buf) != kv.ks[at/32] || string(buf[2:34]) != string(kv.kq[at:at+32]) ||
		binary.LittleEndian.Uint16(buf[rowV+34:]) != kv.vs[at/32+1] || string(buf[rowV+36:rowV+68]) != string(kv.vq[at+32:at+64]) {
		t.Fatal("SaveSeq's bytes are not each row's block_q8_0s")
	}
	if err := f16.LoadSeq(0, 3, buf); err == nil {
		t.Error("an f16 runner loaded q8_0 bytes")
	}
}
