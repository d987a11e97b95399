package exec

import (
	"math"
	"testing"
)

// TestSmallBatchDecodeMatchesAlone decodes 2 to 7 K-quant sequences in one
// step (the matmul's small tiles plus one-row Rows for the leftover) and
// holds each row's logits to that sequence decoded alone: a small tile
// that read the wrong activation row or wrote the wrong output moves
// logits by far more than batchTol.
func TestSmallBatchDecodeMatchesAlone(t *testing.T) {
	const model = "synthetic/tiny256-Q4_K_M.gguf"
	prompts := [][]int32{{1, 403, 407}, {1, 297, 422, 385}, {1, 261}, {1, 378, 432}, {1, 383, 300}, {1, 310, 311, 312}, {1, 99}}
	next := []int32{42, 43, 44, 45, 46, 47, 48}
	want := make([][]float32, len(prompts))
	for s, p := range prompts {
		r := load(t, model, Options{})
		out, err := r.Forward(append(append([]int32(nil), p...), next[s]))
		if err != nil {
			t.Fatal(err)
		}
		want[s] = append([]float32(nil), out...)
	}
	for k := 2; k <= len(prompts); k++ {
		r := load(t, model, Options{Sequences: k})
		var pre, dec Batch
		for s := 0; s < k; s++ {
			for _, tok := range prompts[s] {
				pre.Tokens, pre.Seq = append(pre.Tokens, tok), append(pre.Seq, int32(s))
			}
			dec.Tokens, dec.Seq = append(dec.Tokens, next[s]), append(dec.Seq, int32(s))
		}
		pre.Logits, dec.Logits = 1, k
		if _, err := r.ForwardBatch(pre); err != nil {
			t.Fatal(err)
		}
		got, err := r.ForwardBatch(dec)
		if err != nil {
			t.Fatal(err)
		}
		v := r.m.VocabSize()
		for s := 0; s < k; s++ {
			for j := 0; j < v; j++ {
				if d := math.Abs(float64(got[s*v+j] - want[s][j])); d > batchTol {
					t.Fatalf("%d streams: sequence %d logit %d: %g, alone %g", k, s, j, got[s*v+j], want[s][j])
				}
			}
		}
		// the small-tile step allocates nothing either
		if allocs := testing.AllocsPerRun(10, func() {
			for s := 0; s < k; s++ {
				r.TruncateSeq(s, len(prompts[s]))
			}
			if _, err := r.ForwardBatch(dec); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("%d streams: a decode step allocates %.1f times", k, allocs)
		}
	}
}

// TestPrefillLeftoverRowsMatchDecode prefills 13 rows at once (the Q4_K
// repack order's 2×8 tile on eight, then the 1×4 small tile and one-row
// dots on each of the tile's weight rows for the five left) and holds the
// last logits to the same tokens fed one prefill of eight and then one at
// a time: a leftover row computed against the wrong weight row or written
// to the wrong output moves logits by far more than batchTol.
func TestPrefillLeftoverRowsMatchDecode(t *testing.T) {
	const model = "synthetic/tiny256-Q4_K_M.gguf"
	p := []int32{1, 403, 407, 297, 422, 385, 261, 378, 432, 383, 300, 310, 311}
	a := load(t, model, Options{})
	want, err := a.Forward(p)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), want...)
	b := load(t, model, Options{})
	got, err := b.Forward(p[:8])
	for i := 8; i < len(p) && err == nil; i++ {
		got, err = b.Forward(p[i : i+1])
	}
	if err != nil {
		t.Fatal(err)
	}
	for j := range want {
		if d := math.Abs(float64(got[j] - want[j])); d > batchTol {
			t.Fatalf("logit %d: %g prefilled at once, %g fed in steps", j, want[j], got[j])
		}
	}
}
