package exec

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// A sequence copied with CopySeq, or saved and loaded into another runner,
// continues exactly as the original: the next step's logits are equal bit
// for bit, in either cache type.
func TestCopySaveLoadSeq(t *testing.T) {
	copySaveLoadSeq(t, "stories260K.gguf", KVF16)
	copySaveLoadSeq(t, "synthetic/tiny256-Q4_K_M.gguf", KVQ8_0)
}

func copySaveLoadSeq(t *testing.T, model, kv string) {
	prompt := []int32{1, 403, 407, 261, 378, 432}
	r := load(t, model, Options{Sequences: 3, Context: 32, KVType: kv})
	rows := make([]int32, len(prompt))
	if _, err := r.ForwardBatch(Batch{Tokens: prompt, Seq: rows, Logits: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.CopySeq(1, 0, len(prompt)); err != nil {
		t.Fatal(err)
	}
	if r.SeqPos(1) != len(prompt) {
		t.Fatalf("copied sequence at position %d, want %d", r.SeqPos(1), len(prompt))
	}
	l := r.KVLayout()
	if l.BytesPerToken() <= 0 || r.KVBytes() != int64(l.BytesPerToken())*32*3 {
		t.Fatalf("layout %v: %d bytes a token, %d in all", l.Dims, l.BytesPerToken(), r.KVBytes())
	}
	buf := make([]byte, len(prompt)*l.BytesPerToken())
	if err := r.SaveSeq(0, len(prompt), buf); err != nil {
		t.Fatal(err)
	}
	// Sequence 2 first holds something else: loading replaces it.
	if _, err := r.ForwardBatch(Batch{Tokens: []int32{1, 9, 9}, Seq: []int32{2, 2, 2}, Logits: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.LoadSeq(2, len(prompt), buf); err != nil {
		t.Fatal(err)
	}
	out, err := r.ForwardBatch(Batch{Tokens: []int32{383, 383, 383}, Seq: []int32{0, 1, 2}, Logits: 3})
	if err != nil {
		t.Fatal(err)
	}
	v := r.m.VocabSize()
	for s := 1; s < 3; s++ {
		if !slices.Equal(out[:v], out[s*v:(s+1)*v]) {
			t.Errorf("%s: sequence %d's logits differ from sequence 0's", kv, s)
		}
	}
	// The loaded bytes also continue in another runner of the model.
	o := load(t, model, Options{Context: 32, KVType: kv})
	if !o.KVLayout().Equal(l) {
		t.Fatalf("layouts %v and %v", o.KVLayout().Dims, l.Dims)
	}
	if err := o.LoadSeq(0, len(prompt), buf); err != nil {
		t.Fatal(err)
	}
	// One row: the batch above had three, so llama.cpp's kernel choice
	// differs; compare to the one-row step of the original.
	want := append([]float32(nil), out[:v]...)
	got, err := o.Forward([]int32{383})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > batchTol {
			t.Fatalf("%s: logit %d: loaded %g, original %g", kv, i, got[i], want[i])
		}
	}
	if err := r.CopySeq(0, 0, 1); err == nil {
		t.Error("copy onto itself accepted")
	}
}

func TestKVSeqBounds(t *testing.T) {
	r := load(t, "stories260K.gguf", Options{Sequences: 2, Context: 8})
	if _, err := r.ForwardBatch(Batch{Tokens: []int32{1, 2, 3}, Seq: []int32{0, 0, 0}, Logits: 1}); err != nil {
		t.Fatal(err)
	}
	bpt := r.KVLayout().BytesPerToken()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"copy past the source", r.CopySeq(1, 0, 4), "holds 3"},
		{"copy a negative count", r.CopySeq(1, 0, -1), "holds 3"},
		{"copy to a missing sequence", r.CopySeq(2, 0, 1), "sequence 2 of 2"},
		{"copy from a missing sequence", r.CopySeq(1, -1, 1), "sequence -1 of 2"},
		{"save past the cache", r.SaveSeq(0, 4, make([]byte, 4*bpt)), "holds 3"},
		{"save into a short buffer", r.SaveSeq(0, 3, make([]byte, 3*bpt-1)), "take"},
		{"save a missing sequence", r.SaveSeq(5, 0, nil), "sequence 5"},
		{"load past the context", r.LoadSeq(1, 9, make([]byte, 9*bpt)), "context of 8"},
		{"load a wrong length", r.LoadSeq(1, 2, make([]byte, bpt)), "take"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, c.err, c.want)
		}
	}
	if r.SeqPos(1) != 0 {
		t.Errorf("failed calls moved sequence 1 to %d", r.SeqPos(1))
	}
	// Zero positions is a valid (empty) copy.
	if err := r.CopySeq(1, 0, 0); err != nil || r.SeqPos(1) != 0 {
		t.Errorf("empty copy: %v, position %d", err, r.SeqPos(1))
	}
}

// Hidden is the input of the output head: multiplying it by the output
// matrix gives the logits.
func TestHiddenIsHeadInput(t *testing.T) {
	r := load(t, "stories260K.gguf", Options{LogitsAll: true})
	logits, err := r.Forward([]int32{1, 403, 407})
	if err != nil {
		t.Fatal(err)
	}
	h, w, err := r.Hidden()
	if err != nil {
		t.Fatal(err)
	}
	if w != r.HiddenWidth() || len(h) != 3*w {
		t.Fatalf("hidden %d values of width %d (HiddenWidth %d)", len(h), w, r.HiddenWidth())
	}
	g := r.m.Graph
	wt := &r.m.Weights[g.Nodes[r.outID].Weight]
	if wt.Type.String() != "F32" {
		t.Skipf("output weight is %s; the check needs F32", wt.Type)
	}
	v := r.m.VocabSize()
	row := make([]float32, w)
	for i := 0; i < 3; i++ {
		for _, j := range []int{0, 7, v - 1} {
			dequantRow(t, wt, j, row)
			var dot float64
			for k := range row {
				dot += float64(float64(row[k]) * float64(h[i*w+k]))
			}
			if d := math.Abs(dot - float64(logits[i*v+j])); d > 1e-3 {
				t.Errorf("row %d logit %d: %g from the hidden state, %g from the runner", i, j, dot, logits[i*v+j])
			}
		}
	}
}

func dequantRow(t *testing.T, w *Bound, j int, out []float32) {
	t.Helper()
	rb := w.RowBytes()
	dequantizer(w.Type)(w.Data[j*rb:(j+1)*rb], out)
}

// Without LogitsAll the last block computes the logit rows only, unless a
// step asks for every row's hidden state: then every row equals the
// LogitsAll runner's.
func TestHiddenAllRows(t *testing.T) {
	prompt := []int32{1, 403, 407, 261}
	all := load(t, "stories260K.gguf", Options{LogitsAll: true})
	if _, err := all.Forward(prompt); err != nil {
		t.Fatal(err)
	}
	want, _, err := all.Hidden()
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	r := load(t, "stories260K.gguf", Options{Sequences: 2})
	if _, err := r.ForwardBatch(Batch{Tokens: prompt, Seq: []int32{0, 0, 0, 0}, Logits: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Hidden(); err == nil {
		t.Error("Hidden after a step that skipped rows")
	}
	got, err := r.ForwardHidden(prompt[:3]) // sequence 0 again from position 4: use sequence 1 below
	if err != nil || len(got) != 3*r.HiddenWidth() {
		t.Fatalf("ForwardHidden: %d values, %v", len(got), err)
	}
	if _, err := r.ForwardBatch(Batch{Tokens: prompt, Seq: []int32{1, 1, 1, 1}, Logits: 1, Hidden: true}); err != nil {
		t.Fatal(err)
	}
	got, _, err = r.Hidden()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > batchTol {
			t.Fatalf("value %d (row %d): %g, LogitsAll %g", i, i/r.HiddenWidth(), got[i], want[i])
		}
	}
}
