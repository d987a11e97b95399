package generate

import (
	"context"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
)

// argmaxRunner is a runner with its own argmax, as the CUDA runner's
// ForwardGreedy: here Forward's logits' least id of the largest.
type argmaxRunner struct {
	stepper
	calls int
}

func (a *argmaxRunner) Greedy() bool { return true }

func (a *argmaxRunner) ForwardGreedy(tokens []int32) (int32, error) {
	a.calls++
	l, err := a.Forward(tokens)
	if err != nil {
		return 0, err
	}
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return int32(best), nil
}

// A greedy decode without penalties, constraint or a need for logits takes
// its tokens from the runner's argmax (Step.Logits nil for them) and
// generates what sampling the logits generates; any of those, and the
// runner's Forward serves instead.
func TestRunnerArgmax(t *testing.T) {
	s := open(t, "stories260K.gguf", exec.Options{})
	const n = 24
	run := func(req Request) (toks []int32, nilLogits, calls int) {
		t.Helper()
		a := &argmaxRunner{stepper: s.r}
		s.r = a
		defer func() { s.r = a.stepper }()
		res, err := s.GenerateSteps(context.Background(), req, StepOptions{}, func(st Step) error {
			if st.Token >= 0 && st.Logits == nil {
				nilLogits++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens, nilLogits, a.calls
	}
	base := Request{Prompt: "Once upon a time", MaxTokens: n, Sampling: greedy(), IgnoreEOS: true}
	want, _, _ := run(Request{Prompt: base.Prompt, MaxTokens: n, Sampling: base.Sampling, IgnoreEOS: true, NeedLogits: true})
	got, nilLogits, calls := run(base)
	if !equal(got, want) {
		t.Fatalf("runner argmax: %v, sampled %v", got, want)
	}
	// the first token comes from the prefill's logits, every later one from the runner
	if calls != n-1 || nilLogits != n-1 {
		t.Errorf("runner argmax: %d calls, %d steps without logits; want %d", calls, nilLogits, n-1)
	}
	penalized := base
	penalized.Sampling.RepeatPenalty, penalized.Sampling.RepeatLastN = 1.3, 64
	hot := base
	hot.Sampling.Temperature = 0.7
	for name, req := range map[string]Request{"logits needed": {Prompt: base.Prompt, MaxTokens: n, Sampling: base.Sampling, NeedLogits: true}, "penalties": penalized, "temperature": hot} {
		if _, nilLogits, calls := run(req); calls != 0 || nilLogits != 0 {
			t.Errorf("%s: %d runner argmax calls, %d steps without logits", name, calls, nilLogits)
		}
	}
}
