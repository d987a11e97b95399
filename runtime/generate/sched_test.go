package generate

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
)

// A session on a list of devices (a runtime/sched pipeline of two CPU
// stages) generates what a one-device session does, token for token, the
// prompt pipelined in 4-row pieces, and reuses a cached prefix the same way.
func TestSessionOnSplit(t *testing.T) {
	m, err := Open(td + "stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	opt := exec.Options{Threads: 1, MaxBatch: 4, Context: 256}
	var texts [2][]string
	var toks [2][][]int32
	for i, dev := range []string{"cpu", "cpu,cpu"} {
		s, err := m.NewSessionOn(dev, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"Once upon a time, there was a little dog", "Once upon a time, there was a big cat"} {
			var out strings.Builder
			res, err := s.Generate(context.Background(), Request{Prompt: p, MaxTokens: 24, Sampling: greedy()},
				func(text string) error { out.WriteString(text); return nil })
			if err != nil {
				t.Fatalf("%s: %v", dev, err)
			}
			texts[i] = append(texts[i], out.String())
			toks[i] = append(toks[i], res.Tokens)
		}
		s.Close()
	}
	for j := range texts[0] {
		if texts[0][j] != texts[1][j] || !slices.Equal(toks[0][j], toks[1][j]) {
			t.Errorf("generation %d: cpu %q, cpu,cpu %q", j, texts[0][j], texts[1][j])
		}
	}
}

// Share makes a session that holds the weights in common only where the
// runner can (a GPU runner): the CPU's and a split's say they cannot, and
// the session they were asked of keeps working.
func TestShareNeedsASharingRunner(t *testing.T) {
	m, err := Open(td + "stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, dev := range []string{"cpu", "cpu,cpu"} {
		s, err := m.NewSessionOn(dev, exec.Options{Threads: 1, MaxBatch: 4, Context: 64})
		if err != nil {
			t.Fatal(err)
		}
		if o, err := s.Share(); err == nil || o != nil {
			t.Errorf("%s: shared (%v)", dev, err)
		}
		if _, err := s.Generate(context.Background(), Request{Prompt: "Once", MaxTokens: 4, Sampling: greedy()}, func(string) error { return nil }); err != nil {
			t.Errorf("%s after a refused share: %v", dev, err)
		}
		s.Close()
	}
}
