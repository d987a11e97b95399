package generate

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/sample"
)

// generateAll runs req on s and returns its result and the session's cache.
func generateAll(t *testing.T, s *Session, req Request) (*Result, []int32) {
	t.Helper()
	res, err := s.Generate(context.Background(), req, func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return res, s.Cached()
}

// drafter over stories260K-Q8_0: the same model re-quantized, so its
// guesses are mostly right.
func q8Drafter(t *testing.T, target *Model) *ModelDrafter {
	t.Helper()
	ds := open(t, "derived/stories260K-Q8_0.gguf", exec.Options{})
	d, err := NewModelDrafter(ds, target)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Speculative decoding generates what plain decoding generates, greedy or
// sampled with penalties, for any number of guesses a step, stops where it
// stops and leaves the same cache behind; a drafter of the same model
// re-quantized gets most guesses right. (Not without end: run to the full
// context of 2048, the one-row and several-row kernels' rounding once
// turned a near tie the other way after about 1500 tokens.)
func TestSpeculativeMatchesPlain(t *testing.T) {
	plain := open(t, "stories260K.gguf", exec.Options{})
	spec := open(t, "stories260K.gguf", exec.Options{})
	d := q8Drafter(t, spec.m)
	sampled := sample.DefaultParams()
	sampled.Seed, sampled.RepeatPenalty, sampled.PresencePenalty = 7, 1.1, 0.3
	reqs := []Request{
		{Prompt: "Once upon a time", MaxTokens: 80, Sampling: greedy(), IgnoreEOS: true},
		{Prompt: "The little dog", MaxTokens: 60, Sampling: sampled},
		{Prompt: "Lily went", MaxTokens: 7, Sampling: greedy()},
		{Prompt: "One day", MaxTokens: 200, Sampling: greedy()},
	}
	for _, k := range []int{1, 4, 8} {
		if err := spec.Speculate(d, k); err != nil {
			t.Fatal(err)
		}
		for _, req := range reqs {
			want, wantCache := generateAll(t, plain, req)
			got, gotCache := generateAll(t, spec, req)
			if !slices.Equal(got.Tokens, want.Tokens) || got.StopReason != want.StopReason {
				t.Fatalf("k=%d %q: speculative %v (%s), plain %v (%s)", k, req.Prompt, got.Tokens, got.StopReason, want.Tokens, want.StopReason)
			}
			if !slices.Equal(gotCache, wantCache) || spec.r.Pos() != len(gotCache) {
				t.Fatalf("k=%d %q: cache %v at position %d, plain decoding leaves %v", k, req.Prompt, gotCache, spec.r.Pos(), wantCache)
			}
			if got.Accepted > got.Drafted || got.Drafted == 0 && len(got.Tokens) > 1 {
				t.Fatalf("k=%d %q: %d of %d guesses kept", k, req.Prompt, got.Accepted, got.Drafted)
			}
			if req.Sampling == greedy() && len(got.Tokens) > 20 && got.Accepted*2 < got.Drafted {
				t.Errorf("k=%d %q: the Q8_0 drafter's guesses kept %d of %d", k, req.Prompt, got.Accepted, got.Drafted)
			}
			t.Logf("k=%d %q: %d tokens, %d of %d guesses kept", k, req.Prompt, len(got.Tokens), got.Accepted, got.Drafted)
		}
	}
}

// wrongDrafter guesses a token that is never chosen, or more than asked.
type wrongDrafter struct{ tok int32 }

func (w wrongDrafter) Draft(hist []int32, next int32, k int, dst []int32) ([]int32, error) {
	for i := 0; i < k+3; i++ {
		dst = append(dst, w.tok)
	}
	return dst, nil
}

// Wrong guesses cost rows, never tokens: the output is plain decoding's;
// a guess outside the vocabulary is a clear error.
func TestSpeculativeWrongGuesses(t *testing.T) {
	plain := open(t, "stories260K.gguf", exec.Options{})
	spec := open(t, "stories260K.gguf", exec.Options{MaxBatch: 4})
	req := Request{Prompt: "Once upon a time", MaxTokens: 30, Sampling: greedy(), IgnoreEOS: true}
	if err := spec.Speculate(wrongDrafter{tok: 3}, 3); err != nil {
		t.Fatal(err)
	}
	want, _ := generateAll(t, plain, req)
	got, _ := generateAll(t, spec, req)
	if !slices.Equal(got.Tokens, want.Tokens) {
		t.Fatalf("speculative %v, plain %v", got.Tokens, want.Tokens)
	}
	if err := spec.Speculate(wrongDrafter{tok: 1 << 20}, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := spec.Generate(context.Background(), req, func(string) error { return nil }); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("a guess outside the vocabulary: %v", err)
	}
	if err := spec.Speculate(wrongDrafter{}, 0); err == nil {
		t.Error("0 guesses a step accepted")
	}
	if err := spec.Speculate(wrongDrafter{}, MaxDraft+1); err == nil {
		t.Error("too many guesses a step accepted")
	}
	hidden := &Session{m: spec.m, r: struct{ stepper }{spec.r}, st: &seqState{}}
	if err := hidden.Speculate(wrongDrafter{}, 2); err == nil || !strings.Contains(err.Error(), "every row") {
		t.Errorf("a runner without ForwardRows: %v", err)
	}
}

// A draft model must share the target's vocabulary.
func TestModelDrafterChecksVocabulary(t *testing.T) {
	target := openModel(t, "stories260K.gguf")
	other := open(t, "llama-2-tiny-random.gguf", exec.Options{})
	if _, err := NewModelDrafter(other, target); err == nil || !strings.Contains(err.Error(), "tokens") {
		t.Fatalf("a 32000-token draft for a 512-token model: %v", err)
	}
}

func TestLookupDrafter(t *testing.T) {
	l := LookupDrafter{MinN: 1, MaxN: 3}
	cases := []struct {
		hist []int32
		next int32
		k    int
		want []int32
	}{
		{[]int32{1, 2, 3, 4, 9, 2, 3}, 4, 5, []int32{9, 2, 3, 4}}, // 2 3 4 seen before: 9 followed
		{[]int32{1, 2, 3, 4, 9, 2, 3}, 4, 2, []int32{9, 2}},
		{[]int32{5, 7, 5, 8, 6}, 5, 3, []int32{8, 6, 5}}, // only "5" matches, latest first
		{[]int32{1, 2, 3}, 4, 3, nil},                    // nothing repeats
		{nil, 4, 3, nil},                                 // no history
		{[]int32{7, 7, 7}, 7, 2, []int32{7}},             // the run itself
		{[]int32{1, 2, 1, 2, 1}, 2, 4, []int32{1, 2}},    // the latest 3-gram match
	}
	for _, c := range cases {
		got, err := l.Draft(c.hist, c.next, c.k, nil)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Draft(%v, %d, %d) = %v, %v; want %v", c.hist, c.next, c.k, got, err, c.want)
		}
	}
}

// Prompt lookup on a prompt that the story repeats: the output is plain
// decoding's, and guesses are taken.
func TestSpeculativeLookup(t *testing.T) {
	plain := open(t, "stories260K.gguf", exec.Options{})
	spec := open(t, "stories260K.gguf", exec.Options{})
	if err := spec.Speculate(LookupDrafter{MinN: 1, MaxN: 3}, 4); err != nil {
		t.Fatal(err)
	}
	req := Request{Prompt: "Once upon a time, there was a little girl named Lily. She loved to play outside. Once upon a time", MaxTokens: 60, Sampling: greedy(), IgnoreEOS: true}
	want, _ := generateAll(t, plain, req)
	got, _ := generateAll(t, spec, req)
	if !slices.Equal(got.Tokens, want.Tokens) {
		t.Fatalf("speculative %v, plain %v", got.Tokens, want.Tokens)
	}
	if got.Accepted == 0 {
		t.Errorf("prompt lookup kept none of %d guesses", got.Drafted)
	}
	t.Logf("%d tokens, %d of %d guesses kept", len(got.Tokens), got.Accepted, got.Drafted)
}

// Engine sessions speculate side by side, their drafts from a draft engine
// of their own, and generate what they generate alone.
func TestSpeculativeEngine(t *testing.T) {
	m := openModel(t, "stories260K.gguf")
	dm := openModel(t, "derived/stories260K-Q8_0.gguf")
	e := newEngine(t, m, exec.Options{MaxBatch: 16}, 3)
	de := newEngine(t, dm, exec.Options{}, 3)
	plain := open(t, "stories260K.gguf", exec.Options{})
	prompts := []string{"Once upon a time", "The cat", "Tom and Sue"}
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		res, _ := generateAll(t, plain, Request{Prompt: p, MaxTokens: 40, Sampling: greedy(), IgnoreEOS: true})
		want[i] = res.Tokens
	}
	var wg sync.WaitGroup
	got := make([]*Result, len(prompts))
	errs := make([]error, len(prompts))
	for i, p := range prompts {
		s := e.Session(m, i)
		d, err := NewModelDrafter(de.Session(dm, i), m)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Speculate(d, 2+i); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.Generate(context.Background(), Request{Prompt: p, MaxTokens: 40, Sampling: greedy(), IgnoreEOS: true}, func(string) error { return nil })
		}()
	}
	wg.Wait()
	for i := range prompts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !slices.Equal(got[i].Tokens, want[i]) {
			t.Errorf("%q: engine speculative %v, plain %v", prompts[i], got[i].Tokens, want[i])
		}
		if got[i].Accepted == 0 {
			t.Errorf("%q: no guess kept of %d", prompts[i], got[i].Drafted)
		}
	}
}
