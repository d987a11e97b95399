package generate

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
)

// Sessions of one engine, generating at the same time, each produce what a
// session of its own produces: their rows share steps but not state.
func TestEngineSessionsMatchAlone(t *testing.T) {
	m, err := Open(td + "stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompts := []string{"Once upon a time", "The little dog", "Lily wanted to", "One day, a big cat"}
	want := make([]string, len(prompts))
	alone, err := m.NewSession(exec.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		var b strings.Builder
		if _, err := alone.Generate(context.Background(), Request{Prompt: p, MaxTokens: 40, Sampling: greedy()}, func(s string) error { b.WriteString(s); return nil }); err != nil {
			t.Fatal(err)
		}
		want[i] = b.String()
	}
	alone.Close()

	e, err := m.NewEngine(exec.Options{Threads: 2, MaxBatch: 8}, len(prompts))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for round := 0; round < 2; round++ { // a second round reuses the slots
		got := make([]string, len(prompts))
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var b strings.Builder
				_, err := e.Session(m, i).Generate(context.Background(), Request{Prompt: p, MaxTokens: 40, Sampling: greedy()}, func(s string) error { b.WriteString(s); return nil })
				if err != nil {
					t.Error(err)
				}
				got[i] = b.String()
			}()
		}
		wg.Wait()
		for i := range prompts {
			if got[i] != want[i] {
				t.Errorf("round %d, %q batched:\n got %q\nwant %q", round, prompts[i], got[i], want[i])
			}
		}
	}
}
