package generate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/sample"
)

const td = "../../testdata/"

func open(t *testing.T, path string, opt exec.Options) *Session {
	t.Helper()
	m, err := Open(td + path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if opt.Threads == 0 {
		opt.Threads = 2
	}
	s, err := m.NewSession(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// From text to text: tokenizing the prompt, greedy decoding and streaming
// detokenization together reproduce llama.cpp's output on stories260K.
func TestTextMatchesLlamaCpp(t *testing.T) {
	var ref struct {
		Results []struct {
			Prompt        string
			PromptTokens  []int32 `json:"prompt_tokens"`
			GeneratedText string  `json:"generated_text"`
			GeneratedIDs  []int32 `json:"generated_ids"`
		}
	}
	b, err := os.ReadFile(td + "refs/stories260K/generate.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	s := open(t, "stories260K.gguf", exec.Options{})
	for _, r := range ref.Results {
		var out strings.Builder
		res, err := s.Generate(context.Background(), Request{Prompt: r.Prompt, MaxTokens: len(r.GeneratedIDs), Sampling: greedy()},
			func(text string) error { out.WriteString(text); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if !equal(res.PromptTokens, r.PromptTokens) {
			t.Errorf("%q: prompt tokens %v, llama.cpp %v", r.Prompt, res.PromptTokens, r.PromptTokens)
		}
		if out.String() != r.GeneratedText {
			t.Errorf("%q:\n got %q\nwant %q", r.Prompt, out.String(), r.GeneratedText)
		}
	}
}

func TestErrors(t *testing.T) {
	s := open(t, "stories260K.gguf", exec.Options{Context: 16})
	long := strings.Repeat("Once upon a time ", 20)
	_, err := s.Generate(context.Background(), Request{Prompt: long, MaxTokens: 4, Sampling: greedy()}, func(string) error { return nil })
	if !errors.Is(err, ErrContext) {
		t.Errorf("long prompt: %v", err)
	}
	res, err := s.Generate(context.Background(), Request{Prompt: long, MaxTokens: 4, Truncate: true, Sampling: greedy()}, func(string) error { return nil })
	if err != nil || len(res.Tokens) == 0 {
		t.Errorf("truncated long prompt: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Generate(ctx, Request{Prompt: "Once", Sampling: greedy()}, func(string) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if _, err := Open(td + "vocab/ggml-vocab-bert-bge.gguf"); err == nil || !strings.Contains(err.Error(), `architecture "bert" has no graph`) {
		t.Errorf("unsupported architecture: %v", err)
	}
	if _, err := s.Generate(context.Background(), Request{Prompt: "x", Sampling: sample.Params{Temperature: -1}}, func(string) error { return nil }); err == nil {
		t.Error("invalid sampling parameters accepted")
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func greedy() sample.Params {
	p := sample.DefaultParams()
	p.Temperature = 0
	return p
}
