package exec

import (
	"math"
	"testing"
)

// A chain of stage runners stepped with the same rows as a single runner's
// chunks gives its logits bit for bit, prompt and decode.
func TestStageChainMatchesRunner(t *testing.T) {
	for _, tc := range []struct {
		model string
		cuts  []int
	}{
		{"stories260K.gguf", []int{0, 2, 5}},
		{"stories260K.gguf", []int{0, 1, 3, 5}},
		{"synthetic/tiny256-Q4_K_M.gguf", []int{0, 1, 2}},
	} {
		const piece = 4
		opt := Options{Threads: 2, MaxBatch: piece, Context: 64}
		whole := load(t, tc.model, opt)
		var stages []*Runner
		for i := 0; i+1 < len(tc.cuts); i++ {
			sm, err := whole.m.Stage(tc.cuts[i], tc.cuts[i+1])
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRunner(sm, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			stages = append(stages, r)
		}
		chain := func(toks []int32) []float32 {
			var h []float32
			for i, s := range stages {
				out, err := s.StageStep(toks, h, len(toks))
				if err != nil {
					t.Fatalf("%s stage %d: %v", tc.model, i, err)
				}
				h = append([]float32(nil), out...)
			}
			return h
		}
		prompt := []int32{1, 403, 407, 261, 378, 286, 310, 331, 263, 265, 300, 270, 290}
		var got []float32
		for p := prompt; len(p) > 0; {
			n := min(piece, len(p))
			got = chain(p[:n])
			p = p[n:]
		}
		want, err := whole.Forward(prompt)
		if err != nil {
			t.Fatal(err)
		}
		for step := 0; ; step++ {
			if len(got) != len(want) {
				t.Fatalf("%s %v step %d: %d logits, want %d", tc.model, tc.cuts, step, len(got), len(want))
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %v step %d: logit %d is %v, want %v", tc.model, tc.cuts, step, i, got[i], want[i])
				}
			}
			if step == 6 {
				break
			}
			tok := argmax(want)
			got = chain([]int32{tok})
			if want, err = whole.Forward([]int32{tok}); err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range stages {
			if s.Pos() != whole.Pos() {
				t.Errorf("stage %d at %d, runner at %d", i, s.Pos(), whole.Pos())
			}
		}
	}
}

func TestStageStepBadInput(t *testing.T) {
	whole := load(t, "stories260K.gguf", Options{MaxBatch: 4, Context: 8})
	sm, err := whole.m.Stage(2, 5)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(sm, Options{Threads: 1, MaxBatch: 4, Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if in, out := sm.StageWidth(); in != 64 || out != 0 {
		t.Fatalf("widths %d, %d", in, out)
	}
	if _, err := r.StageStep(nil, make([]float32, 64), 2); err == nil {
		t.Error("short input accepted")
	}
	if _, err := r.StageStep(nil, make([]float32, 64*5), 5); err == nil {
		t.Error("more rows than the batch accepted")
	}
	if _, err := whole.StageStep([]int32{1, 99999}, nil, 2); err == nil {
		t.Error("token outside the vocabulary accepted")
	}
	if _, err := whole.m.Stage(3, 3); err == nil {
		t.Error("empty stage accepted")
	}
}
