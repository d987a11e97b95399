package exec

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/weights"
)

// Feeding a prompt in one step or token by token must give the same logits
// up to float noise: the KV cache and positions are right. The noise is not
// zero: like llama.cpp, one row and several rows run different F32 kernels,
// and an f16 KV value can round the other way (~1e-3 in a logit).
func TestBatchEqualsStepwise(t *testing.T) {
	prompt := []int32{1, 403, 407, 261, 378, 432, 383}
	a := load(t, "stories260K.gguf", Options{})
	whole, err := a.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	whole = append([]float32(nil), whole...)
	b := load(t, "stories260K.gguf", Options{MaxBatch: 3})
	chunked, err := b.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	c := load(t, "stories260K.gguf", Options{})
	var step []float32
	for _, tok := range prompt {
		if step, err = c.Forward([]int32{tok}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range whole {
		if d := math.Abs(float64(whole[i] - step[i])); d > batchTol {
			t.Fatalf("logit %d: batch %g, stepwise %g", i, whole[i], step[i])
		}
		if d := math.Abs(float64(whole[i] - chunked[i])); d > batchTol {
			t.Fatalf("logit %d: batch %g, chunked %g", i, whole[i], chunked[i])
		}
	}
}

// batchTol bounds |batch logit − stepwise logit|; a wrong position or KV
// slot moves logits by far more (whole units on stories260K).
const batchTol = 5e-3

func TestLogitsAll(t *testing.T) {
	prompt := []int32{1, 403, 407, 261, 378}
	r := load(t, "stories260K.gguf", Options{LogitsAll: true})
	all, err := r.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	all = append([]float32(nil), all...)
	v := r.m.VocabSize()
	if len(all) != len(prompt)*v {
		t.Fatalf("%d logits, want %d", len(all), len(prompt)*v)
	}
	s := load(t, "stories260K.gguf", Options{})
	for i := range prompt {
		step, err := s.Forward(prompt[i : i+1])
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < v; j++ {
			if d := math.Abs(float64(all[i*v+j] - step[j])); d > batchTol {
				t.Fatalf("row %d logit %d: %g vs %g", i, j, all[i*v+j], step[j])
			}
		}
	}
}

// ForwardRows on a runner without LogitsAll returns every row's logits of
// its one step, continuing the sequence where it stands, and refuses what
// one step cannot carry.
func TestForwardRows(t *testing.T) {
	prompt := []int32{1, 403, 407, 261, 378, 432, 383}
	r := load(t, "stories260K.gguf", Options{MaxBatch: 4})
	if _, err := r.Forward(prompt[:3]); err != nil {
		t.Fatal(err)
	}
	rows, err := r.ForwardRows(prompt[3:])
	if err != nil {
		t.Fatal(err)
	}
	rows = append([]float32(nil), rows...)
	v := r.m.VocabSize()
	if len(rows) != 4*v || r.Pos() != len(prompt) {
		t.Fatalf("%d logits at position %d, want %d at %d", len(rows), r.Pos(), 4*v, len(prompt))
	}
	s := load(t, "stories260K.gguf", Options{})
	for i, tok := range prompt {
		step, err := s.Forward([]int32{tok})
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			continue
		}
		for j := 0; j < v; j++ {
			if d := math.Abs(float64(rows[(i-3)*v+j] - step[j])); d > batchTol {
				t.Fatalf("row %d logit %d: %g vs %g", i, j, rows[(i-3)*v+j], step[j])
			}
		}
	}
	if _, err := r.ForwardRows(make([]int32, 5)); err == nil || !strings.Contains(err.Error(), "exceed the batch") {
		t.Errorf("5 rows on a batch of 4: %v", err)
	}
	if _, err := r.ForwardRows(nil); err == nil {
		t.Error("no rows accepted")
	}
	if _, err := r.ForwardRows([]int32{1, 9999}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("bad token id: %v", err)
	}
	if r.Pos() != len(prompt) {
		t.Errorf("refused steps moved the position to %d", r.Pos())
	}
}

func TestBadInput(t *testing.T) {
	r := load(t, "stories260K.gguf", Options{Context: 8})
	if _, err := r.Forward([]int32{1, 9999}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("bad token id: %v", err)
	}
	if _, err := r.Forward(make([]int32, 9)); err == nil || !strings.Contains(err.Error(), "exceed the context") {
		t.Errorf("context overflow: %v", err)
	}
	if _, err := r.Forward(nil); err == nil {
		t.Error("empty input accepted")
	}
}

// A warm decode step allocates nothing on the Go heap, with either cache.
func TestDecodeAllocatesNothing(t *testing.T) {
	for _, c := range []struct{ model, kv string }{
		{"stories260K.gguf", KVF16}, {"synthetic/tiny256-Q4_K_M.gguf", KVF16}, {"synthetic/tiny256-Q4_K_M.gguf", KVQ8_0},
	} {
		model := c.model + " " + c.kv
		r := load(t, c.model, Options{Context: 512, KVType: c.kv})
		if _, err := r.Forward([]int32{1, 17, 300}); err != nil {
			t.Fatal(err)
		}
		tok := []int32{42}
		allocs := testing.AllocsPerRun(50, func() {
			if r.Pos() >= r.Context()-1 {
				r.Truncate(3)
			}
			if _, err := r.Forward(tok); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: a decode step allocates %.1f times", model, allocs)
		}
	}
}

func BenchmarkDecodeTiny256Q4K(b *testing.B) {
	r := load(b, "synthetic/tiny256-Q4_K_M.gguf", Options{Context: 1024})
	if _, err := r.Forward([]int32{1, 17, 300}); err != nil {
		b.Fatal(err)
	}
	tok := []int32{42}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if r.Pos() >= r.Context()-1 {
			r.Truncate(3)
		}
		if _, err := r.Forward(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// A weight type the CPU kernels cannot multiply is refused at load, naming
// the tensor, rather than failing mid-step.
func TestLoadRefusesUncomputableType(t *testing.T) {
	src, err := weights.Open(filepath.Join(testdata, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, err = Load(retyped{src, "blk.0.attn_q.weight", quant.Q8_K})
	if err == nil || !strings.Contains(err.Error(), "blk.0.attn_q.weight is Q8_K") {
		t.Fatalf("got %v", err)
	}
}

// retyped reports one tensor as another type (with a matching byte size).
type retyped struct {
	weights.Source
	name string
	typ  quant.Type
}

func (r retyped) Tensor(name string) (weights.Tensor, bool) {
	t, ok := r.Source.Tensor(name)
	if ok && name == r.name {
		t.Type = r.typ
	}
	return t, ok
}

// Rows of several sequences in one step give each sequence what it would
// get alone: the KV slots and positions are kept apart, in either cache.
func TestForwardBatchMatchesSeparateSequences(t *testing.T) {
	forwardBatchMatchesSeparate(t, "stories260K.gguf", KVF16)
	forwardBatchMatchesSeparate(t, "synthetic/tiny256-Q4_K_M.gguf", KVQ8_0)
}

func forwardBatchMatchesSeparate(t *testing.T, model, kv string) {
	a := []int32{1, 403, 407, 261, 378}
	b := []int32{1, 297, 422, 385}
	alone := func(p []int32) []float32 {
		r := load(t, model, Options{KVType: kv})
		out, err := r.Forward(p)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), out...)
	}
	wantA, wantB := alone(a), alone(b)
	r := load(t, model, Options{Sequences: 3, KVType: kv})
	// Prompts' leading rows first, the two rows that need logits last.
	var batch Batch
	for _, tok := range a[:len(a)-1] {
		batch.Tokens, batch.Seq = append(batch.Tokens, tok), append(batch.Seq, 2)
	}
	for _, tok := range b[:len(b)-1] {
		batch.Tokens, batch.Seq = append(batch.Tokens, tok), append(batch.Seq, 0)
	}
	batch.Tokens = append(batch.Tokens, a[len(a)-1], b[len(b)-1])
	batch.Seq = append(batch.Seq, 2, 0)
	batch.Logits = 2
	got, err := r.ForwardBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	v := r.m.VocabSize()
	for j := 0; j < v; j++ {
		if d := math.Abs(float64(got[j] - wantA[j])); d > batchTol {
			t.Fatalf("%s %s: sequence a logit %d: %g, alone %g", model, kv, j, got[j], wantA[j])
		}
		if d := math.Abs(float64(got[v+j] - wantB[j])); d > batchTol {
			t.Fatalf("%s %s: sequence b logit %d: %g, alone %g", model, kv, j, got[v+j], wantB[j])
		}
	}
	if r.SeqPos(2) != len(a) || r.SeqPos(0) != len(b) || r.SeqPos(1) != 0 {
		t.Fatalf("positions %d %d %d", r.SeqPos(0), r.SeqPos(1), r.SeqPos(2))
	}
	// One decode row per sequence, batched, allocates nothing.
	dec := Batch{Tokens: []int32{42, 43}, Seq: []int32{0, 2}, Logits: 2}
	allocs := testing.AllocsPerRun(20, func() {
		r.TruncateSeq(0, len(b))
		r.TruncateSeq(2, len(a))
		if _, err := r.ForwardBatch(dec); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%s %s: a batched decode step allocates %.1f times", model, kv, allocs)
	}
	for _, bad := range []Batch{
		{Tokens: []int32{1}, Seq: []int32{3}, Logits: 1},
		{Tokens: []int32{1, 2}, Seq: []int32{0}, Logits: 1},
		{Tokens: []int32{1}, Seq: []int32{0}, Logits: 2},
	} {
		if _, err := r.ForwardBatch(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}
