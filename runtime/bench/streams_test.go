package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/tune"
)

// TestRunStreamsStories runs 1 and 2 streams on stories260K and checks that
// every stream generated n tokens and that each stream's greedy tokens are
// those of the same prompt run alone in a session of its own: batched
// decode is exact per row.
func TestRunStreamsStories(t *testing.T) {
	m, err := generate.Open("../../testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const p, n = 12, 40
	rep, err := RunStreams(context.Background(), m, "stories260K.gguf", StreamsConfig{Streams: []int{1, 2}, Prompt: p, Gen: n, Reps: 2, Threads: 1, Tune: tune.Off, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Model != "llama 292.80K F32" || rep.Threads != 1 || rep.Reps != 2 {
		t.Fatalf("report: %+v", rep)
	}
	alone, err := m.NewSession(exec.Options{Threads: 1, Context: p + n})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	for k, run := range rep.Runs {
		if run.Streams != k+1 || run.Prompt != p || run.Gen != n || len(run.Samples) != 2 || len(run.Tokens) != k+1 {
			t.Fatalf("run %d: %+v", k, run)
		}
		if run.DecodeTPS <= 0 || run.PrefillTPS <= 0 || run.TTFTMean <= 0 || run.TTFTMax < run.TTFTMean || run.Ratio <= 0 {
			t.Errorf("run %d figures: %+v", k, run)
		}
		if run.DecodeTPS != slices.Max(run.Samples) {
			t.Errorf("run %d: best %v is not the samples' max %v", k, run.DecodeTPS, run.Samples)
		}
		for i, toks := range run.Tokens {
			if len(toks) != n || len(run.PromptTokens[i]) != p {
				t.Fatalf("run %d stream %d: %d tokens after a prompt of %d", k, i, len(toks), len(run.PromptTokens[i]))
			}
			res, err := alone.Generate(context.Background(), generate.Request{Tokens: run.PromptTokens[i], MaxTokens: n, Sampling: sampleGreedy(), IgnoreEOS: true}, func(string) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tokens, toks) {
				t.Errorf("run %d stream %d batched %v, alone %v", k, i, toks, res.Tokens)
			}
		}
	}
	if v := rep.Runs[1].RowsPerStep; v < 1 || v > 2 {
		t.Errorf("2 streams: %.2f rows per decode step", v)
	}
	t.Logf("2 streams: %.2f rows per decode step", rep.Runs[1].RowsPerStep)
	if rep.Runs[0].Ratio != 1 {
		t.Errorf("one stream's ratio %v", rep.Runs[0].Ratio)
	}
	if slices.Equal(rep.Runs[1].PromptTokens[0], rep.Runs[1].PromptTokens[1]) {
		t.Error("the two streams share a prompt")
	}
	if !slices.Equal(rep.Runs[0].PromptTokens[0], rep.Runs[1].PromptTokens[0]) {
		t.Error("stream 0's prompt changed with the stream count")
	}
	var b bytes.Buffer
	if err := rep.Table(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| streams |", "| decode t/s |", " 1.00× |", "load average"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestCheckStreams(t *testing.T) {
	ok := StreamsConfig{Streams: []int{1, 8}, Prompt: 64, Gen: 64}
	if err := CheckStreams(ok); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(*StreamsConfig)
		want string
	}{
		{func(c *StreamsConfig) { c.Streams = nil }, "no stream counts"},
		{func(c *StreamsConfig) { c.Streams = []int{0} }, "outside 1..64"},
		{func(c *StreamsConfig) { c.Streams = []int{65} }, "outside 1..64"},
		{func(c *StreamsConfig) { c.Prompt = 0 }, "prompt tokens 0"},
		{func(c *StreamsConfig) { c.Gen = 1 }, "generated tokens 1"},
		{func(c *StreamsConfig) { c.Prompt = MaxStreamTokens + 1 }, "outside 1..8192"},
		{func(c *StreamsConfig) { c.Streams, c.Prompt, c.Gen = []int{64}, 8000, 8000 }, "KV positions"},
		{func(c *StreamsConfig) { c.Reps = 1000 }, "runs 1000"},
		{func(c *StreamsConfig) { c.Prompts = [][]int32{{1, 2}} }, "fewer than the 64"},
	} {
		cfg := ok
		c.edit(&cfg)
		if err := CheckStreams(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cfg, err, c.want)
		}
	}
}
