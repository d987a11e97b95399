package exec

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/cpukern"
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

// attendGroupQ8Native gives the generated AttentionSeqQ8_0's values bit for
// bit for every registered native build: head dims 64 and 128 (and an odd
// block count, 96, and 256), GQA groups of 1 to 8, positions inside and
// across the 64-position blocks and the dots' 16- and 8-row passes, two
// sequences, and caches with extreme quants (-128, ±127) and scales.
func TestAttendGroupQ8NativeMatches(t *testing.T) {
	ks := cpukern.AllAttentionQ8()
	if len(ks) == 0 {
		t.Skip("no native q8_0 attention registered on this CPU")
	}
	r := rand.New(rand.NewPCG(21, 22))
	sc := new(attnScratch)
	for _, c := range []struct{ hd, g int }{{64, 1}, {64, 4}, {64, 8}, {128, 1}, {128, 2}, {128, 4}, {96, 3}, {256, 4}} {
		for _, extremes := range []bool{false, true} {
			const kvHeads, ctx, seqs = 2, 150, 2
			heads, kvDim := kvHeads*c.g, kvHeads*c.hd
			kq, vq := make([]byte, seqs*ctx*kvDim), make([]byte, seqs*ctx*kvDim)
			kd, vd := make([]uint16, len(kq)/32), make([]uint16, len(vq)/32)
			for i := range kq {
				kq[i], vq[i] = byte(int8(r.NormFloat64()*50)), byte(int8(r.NormFloat64()*50))
				if extremes && r.IntN(20) == 0 {
					kq[i], vq[i] = []byte{0x80, 0x7f, 0x81}[r.IntN(3)], []byte{0x80, 0x7f, 0x81}[r.IntN(3)]
				}
			}
			for i := range kd {
				kd[i] = quant.F32ToF16(float32(r.ExpFloat64() * 0.05))
				vd[i] = quant.F32ToF16(float32(r.ExpFloat64() * 0.02))
				if extremes && r.IntN(10) == 0 {
					kd[i] = []uint16{0x7bff, 0x0001, 0x0000, 0x3c00}[r.IntN(4)]
					vd[i] = []uint16{0x7bff, 0x0001, 0x8000, 0x3c00}[r.IntN(4)]
				}
			}
			q := make([]float32, c.g*c.hd)
			qq, qd := make([]byte, len(q)), make([]float32, len(q)/32)
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			for _, pos := range []int{0, 1, 7, 15, 16, 17, 63, 64, 65, 100, ctx - 1} {
				for i := range q {
					q[i] = float32(r.NormFloat64() * 3)
				}
				if extremes {
					q[r.IntN(len(q))] = 1e30 // a block of zeros and one 127
				}
				quant.QuantizeQ8_0Split(q, qq, qd)
				seq, kvh := r.IntN(seqs), r.IntN(kvHeads)
				// the generated kernel: row 0 at pos in seq, this group's heads
				want := make([]float32, len(q))
				cpugen.AttentionSeqQ8_0(qq, qd, kq, kd, vq, vd, want, []int32{int32(pos)}, []int32{int32(seq)},
					c.hd, heads, c.g, kvDim, ctx, kvh*c.g, scale)
				off := seq*ctx*kvDim + kvh*c.hd
				for _, k := range ks {
					got := make([]float32, len(q))
					attendGroupQ8Native(&k, sc, qq, qd, kq, kd, vq, vd, got, c.g, pos, off, kvDim, scale)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
							t.Fatalf("%s hd %d g %d pos %d extremes %v: value %d is %v, AttentionSeqQ8_0 %v", k.ISA, c.hd, c.g, pos, extremes, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestAttendGroupQ8NativeNoAllocs(t *testing.T) {
	nk, ok := nativeAttentionQ8(64)
	if !ok {
		t.Skip("no native q8_0 attention registered on this CPU")
	}
	const hd, g, pos, kvDim = 64, 4, 200, 512
	kq, vq := make([]byte, (pos+1)*kvDim), make([]byte, (pos+1)*kvDim)
	kd, vd := make([]uint16, len(kq)/32), make([]uint16, len(vq)/32)
	qq, qd, y := make([]byte, g*hd), make([]float32, g*hd/32), make([]float32, g*hd)
	sc := new(attnScratch)
	if n := testing.AllocsPerRun(20, func() {
		attendGroupQ8Native(&nk, sc, qq, qd, kq, kd, vq, vd, y, g, pos, 0, kvDim, 0.125)
	}); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}

func TestAttentionQ8ISA(t *testing.T) {
	want := "go"
	if nk, ok := cpukern.LookupAttentionQ8(); ok {
		want = nk.ISA
	}
	if got := AttentionQ8ISA(64); got != want {
		t.Errorf("AttentionQ8ISA(64) = %q, want %q", got, want)
	}
	for _, hd := range []int{32, 48} {
		if got := AttentionQ8ISA(hd); got != "go" {
			t.Errorf("AttentionQ8ISA(%d) = %q, want go", hd, got)
		}
	}
}

// withQ8Native runs f with the q8_0 cache's native loops on or off (for
// runners made inside f).
func withQ8Native(on bool, f func()) {
	old := attnQ8Native
	attnQ8Native = on
	defer func() { attnQ8Native = old }()
	f()
}

// A q8_0 runner gives the same bits with the native loops as with the
// generated AttentionSeqQ8_0: every attention node of a 100-row prefill
// (stepped node by node in lockstep), then the logits of batched steps of
// two sequences, prefill and decode.
func TestAttentionQ8NativeEndToEnd(t *testing.T) {
	if _, ok := cpukern.LookupAttentionQ8(); !ok {
		t.Skip("no native q8_0 attention registered on this CPU")
	}
	const model = "synthetic/tiny256-Q4_K_M.gguf"
	var off, on *Runner
	withQ8Native(false, func() { off = load(t, model, Options{Context: 160, Sequences: 2, KVType: KVQ8_0}) })
	withQ8Native(true, func() { on = load(t, model, Options{Context: 160, Sequences: 2, KVType: KVQ8_0}) })
	r := rand.New(rand.NewPCG(8, 9))
	prompt := make([]int32, 100)
	for i := range prompt {
		prompt[i] = int32(3 + r.IntN(1000))
	}
	n := len(prompt)
	for _, x := range []*Runner{off, on} {
		copy(x.tokens, prompt)
		for i := range n {
			x.rowSeq[i], x.rowPos[i] = 0, int32(i)
		}
		x.nRows, x.outRow, x.qSrc = n, n-1, -1
	}
	checked := 0
	for i := range off.steps {
		off.steps[i]()
		on.steps[i]()
		nd := off.m.Graph.Nodes[i]
		if nd.Op != dsl.OpAttention {
			continue
		}
		a, b := off.bufs[i][:n*nd.Cols], on.bufs[i][:n*nd.Cols]
		for j := range a {
			if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
				t.Fatalf("layer %d value %d: native %v, generated %v", nd.Layer, j, b[j], a[j])
			}
		}
		checked++
	}
	if checked != off.m.Graph.Layers {
		t.Fatalf("%d attention nodes checked of %d layers", checked, off.m.Graph.Layers)
	}
	for l := range off.kv { // the native quantizer's cache rows are KVStoreSeqQ8_0's
		a, b := &off.kv[l], &on.kv[l]
		if string(a.kq) != string(b.kq) || string(a.vq) != string(b.vq) || !slices.Equal(a.ks, b.ks) || !slices.Equal(a.vs, b.vs) {
			t.Fatalf("layer %d: the caches differ", l)
		}
	}
	// batched steps from empty caches: sequence 0 a 70-token prompt, 1 a
	// 5-token one, then decode steps of both
	off.Truncate(0)
	on.Truncate(0)
	step := func(b Batch) {
		t.Helper()
		la, err := off.ForwardBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		la = append([]float32(nil), la...)
		lb, err := on.ForwardBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range la {
			if math.Float32bits(la[i]) != math.Float32bits(lb[i]) {
				t.Fatalf("logit %d: native %v, generated %v", i, lb[i], la[i])
			}
		}
	}
	var b Batch
	for i := range 75 {
		b.Tokens = append(b.Tokens, int32(3+r.IntN(1000)))
		b.Seq = append(b.Seq, int32(min(i/70, 1)))
	}
	b.Logits = 2
	step(b)
	for range 12 {
		step(Batch{Tokens: []int32{int32(3 + r.IntN(1000)), int32(3 + r.IntN(1000))}, Seq: []int32{0, 1}, Logits: 2})
	}
}

// The native quantizer's path gives quant.QuantizeQ8_0Split's query blocks
// and KVStoreSeqQ8_0's cache rows, ties, zero blocks and rows longer than
// the scratch included.
func TestQuantizeQ8Native(t *testing.T) {
	var qz func([]float32, []byte)
	withQ8Native(true, func() { qz = q8Quantizer() })
	if qz == nil {
		t.Skip("no native Q8_0 quantizer registered on this CPU")
	}
	r := rand.New(rand.NewPCG(13, 14))
	sc := new(attnScratch)
	for _, n := range []int{32, 64, 256, 1024, 2048 + 96} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(12)-6))
		}
		clear(x[:min(n, 32)]) // a zero block
		if n >= 64 {
			for i, v := range []float32{127, 0.5, -1.5, 2.5, -63.5} { // exact halves at id = 1
				x[32+i] = v
			}
		}
		wq, wd := make([]byte, n), make([]float32, n/32)
		quant.QuantizeQ8_0Split(x, wq, wd)
		if n <= maxGroupVals {
			gq, gd := make([]byte, n), make([]float32, n/32)
			quantizeQ8Split(qz, sc, x, gq, gd)
			if string(gq) != string(wq) || !slices.EqualFunc(gd, wd, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Fatalf("%d values: quantizeQ8Split differs from QuantizeQ8_0Split", n)
			}
		}
		// one row of n values at position 1 of sequence 0 (ctx 2)
		kq, vq := make([]byte, 2*n), make([]byte, 2*n)
		ks, vs := make([]uint16, 2*n/32), make([]uint16, 2*n/32)
		cpugen.KVStoreSeqQ8_0(x, x, kq, vq, ks, vs, []int32{1}, []int32{0}, n, 2)
		gq, gs := make([]byte, 2*n), make([]uint16, 2*n/32)
		storeQ8(qz, sc, x, kvCache{q: gq, s: gs}, n)
		if string(gq[n:]) != string(kq[n:]) || !slices.Equal(gs[n/32:], ks[n/32:]) {
			t.Fatalf("%d values: storeQ8 differs from KVStoreSeqQ8_0", n)
		}
	}
}
