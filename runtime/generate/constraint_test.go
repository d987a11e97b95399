package generate

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/grammar"
	"github.com/jitllm/jitllm/runtime/sample"
)

// A grammar constraint makes the output match, stops the generation when
// it is complete, and leaves Step.Logits raw (the chosen tokens are not
// always the model's greedy ones).
func TestConstraint(t *testing.T) {
	s := open(t, "stories260K.gguf", exec.Options{})
	g, err := grammar.CompileSchema([]byte(`{"type":"object","properties":{"who":{"enum":["Lily","Tom"]},"age":{"type":"integer"}},"required":["who","age"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	v := grammar.NewVocab(s.m.Tok)
	p := sample.DefaultParams()
	p.Temperature = 0
	req := Request{Prompt: "Once upon a time", MaxTokens: 200, Sampling: p,
		Constraint: func() Constraint { return grammar.NewConstraint(g, v) }}
	var text strings.Builder
	offGreedy := 0
	res, err := s.GenerateSteps(context.Background(), req, StepOptions{}, func(st Step) error {
		text.WriteString(st.Text)
		if st.Token >= 0 && sample.Argmax(st.Logits) != st.Token {
			offGreedy++
		}
		for _, x := range st.Logits {
			if math.IsInf(float64(x), -1) {
				return errors.New("Step.Logits were masked")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "constraint" || !g.Match([]byte(text.String())) {
		t.Fatalf("%s: %q", res.StopReason, text.String())
	}
	if offGreedy == 0 {
		t.Error("the constraint changed no token: the test proves nothing")
	}
	// Without it the same prompt is a story.
	req.Constraint = nil
	req.MaxTokens = 10
	out := ""
	if _, err := s.Generate(context.Background(), req, func(t string) error { out += t; return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Errorf("unconstrained output %q", out)
	}
}
