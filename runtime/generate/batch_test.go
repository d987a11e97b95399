package generate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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

// BenchmarkEngineStreams measures aggregate decode tokens/s with 1 and 8
// concurrent sessions of one engine (the server's continuous batching).
// Run: go test -run '^$' -bench EngineStreams -benchtime 3x ./runtime/generate
func BenchmarkEngineStreams(b *testing.B) {
	for _, model := range []string{"synthetic/tiny256-Q4_K_M.gguf", "stories260K.gguf"} {
		m, err := Open(td + model)
		if err != nil {
			b.Fatal(err)
		}
		for _, streams := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/streams=%d", model, streams), func(b *testing.B) {
				e, err := m.NewEngine(exec.Options{Threads: 2, Context: 512}, streams)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				const n = 128
				p := greedy()
				p.Temperature, p.Seed = 1, 7 // no early end of text
				b.ResetTimer()
				start := time.Now()
				tokens := 0
				for it := 0; it < b.N; it++ {
					var wg sync.WaitGroup
					var mu sync.Mutex
					for i := 0; i < streams; i++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							res, err := e.Session(m, i).Generate(context.Background(), Request{Tokens: []int32{1, 17, 30}, MaxTokens: n, Sampling: p, IgnoreEOS: true}, func(string) error { return nil })
							if err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							tokens += len(res.Tokens)
							mu.Unlock()
						}()
					}
					wg.Wait()
				}
				b.ReportMetric(float64(tokens)/time.Since(start).Seconds(), "tok/s")

			})
		}
		m.Close()
	}
}
