// Package reftest holds what the tests that gate model graphs against a
// reference share: small shapes of the synth presets, and every row's
// logits from Hugging Face transformers on random weights (python3 with
// torch and transformers, which the GPU machine has; a test skips, saying
// so, where they are absent).
package reftest

import (
	"bytes"
	"encoding/json"
	"math"
	osexec "os/exec"
	"testing"

	"github.com/jitllm/jitllm/runtime/synth"
)

// Shape is a preset's architecture at a size a test runs in milliseconds,
// with vocab tokens: two blocks of width 96; the head width is not
// embd/heads where the preset sets its own (qwen3's), so a graph that
// assumed it would fail.
func Shape(t testing.TB, like string, vocab int) synth.Shape {
	t.Helper()
	s, err := synth.Like(like)
	if err != nil {
		t.Fatal(err)
	}
	s.Vocab, s.Embd, s.Heads, s.KVHeads, s.FF = vocab, 96, 4, 2, 160
	if s.QKNorm {
		s.HeadDim = 32
	} else {
		s.HeadDim = 24 // llama derives it from embd/heads
	}
	return s
}

// Python is the python3 that can run a transformers reference; the test
// skips where there is none.
func Python(t testing.TB) string {
	t.Helper()
	py, err := osexec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: the transformers reference cannot run here")
	}
	if out, err := osexec.Command(py, "-c", "import torch, transformers").CombinedOutput(); err != nil {
		t.Skipf("python3 lacks torch or transformers (%v): the reference cannot run here\n%s", err, lastLine(out))
	}
	return py
}

// Reference is what a reference script prints: every row's logits and the
// versions that computed them.
type Reference struct {
	Logits       [][]float64 `json:"logits"`
	Transformers string      `json:"transformers"`
	Torch        string      `json:"torch"`
}

// Logits runs script with args under py and reads its Reference.
func Logits(t testing.TB, py, script string, args ...string) Reference {
	t.Helper()
	cmd := osexec.Command(py, append([]string{script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	var ref Reference
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatalf("%s output: %v", script, err)
	}
	return ref
}

// Compare holds got, rows of vocab logits, to the reference's: within
// 0.003 of the largest reference logit.
func Compare(t testing.TB, got []float32, rows, vocab int, ref Reference) {
	t.Helper()
	if len(ref.Logits) != rows || len(got) != rows*vocab {
		t.Fatalf("%d reference rows and %d logits, want %d rows of %d", len(ref.Logits), len(got), rows, vocab)
	}
	var worst, scale float64
	for pos, want := range ref.Logits {
		if len(want) != vocab {
			t.Fatalf("reference row %d has %d logits, want %d", pos, len(want), vocab)
		}
		for i, w := range want {
			worst = math.Max(worst, math.Abs(float64(got[pos*vocab+i])-w))
			scale = math.Max(scale, math.Abs(w))
		}
	}
	t.Logf("transformers %s, torch %s: max |logit − reference| %.3g of max |logit| %.3g", ref.Transformers, ref.Torch, worst, scale)
	if worst > 0.003*scale || scale == 0 || math.IsNaN(worst) {
		t.Errorf("logits differ from transformers' by %.3g (max |logit| %.3g)", worst, scale)
	}
}

// lastLine is b's last line: what a failed import says last.
func lastLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}
