package main

import (
	"bytes"
	"strings"
	"testing"
)

// jitllm run with a draft model or prompt lookup prints what it prints
// without (greedy), and refuses a draft of another vocabulary or both
// ways at once.
func TestRunSpeculative(t *testing.T) {
	run := func(args ...string) (string, error) {
		t.Helper()
		var buf bytes.Buffer
		root.SetOut(&buf)
		root.SetErr(&buf)
		root.SetArgs(append([]string{"run", stories, "-p", "Once upon a time", "-n", "48", "--temp", "0", "-t", "2"}, args...))
		defer root.SetArgs(nil)
		err := root.Execute()
		return buf.String(), err
	}
	plain, err := run("--model-draft=", "--lookup=0")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--model-draft=../../testdata/derived/stories260K-Q4_0.gguf", "--lookup=0", "--draft-max=5"},
		{"--model-draft=", "--lookup=3"},
	} {
		got, err := run(args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if got != plain {
			t.Errorf("%v printed\n%s\nwithout speculation\n%s", args, got, plain)
		}
	}
	if _, err := run("--model-draft=../../testdata/llama-2-tiny-random.gguf", "--lookup=0"); err == nil || !strings.Contains(err.Error(), "tokens") {
		t.Errorf("a draft of another vocabulary: %v", err)
	}
	if _, err := run("--model-draft=../../testdata/derived/stories260K-Q4_0.gguf", "--lookup=2"); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("both ways to draft: %v", err)
	}
	run("--model-draft=", "--lookup=0")
}

// jitllm run --cache-type q8_0 generates on a model whose heads hold whole
// q8_0 blocks, and names what it refuses.
func TestRunCacheType(t *testing.T) {
	run := func(model string, args ...string) (string, error) {
		t.Helper()
		var buf bytes.Buffer
		root.SetOut(&buf)
		root.SetErr(&buf)
		root.SetArgs(append([]string{"run", model, "-p", " t1 t2", "-n", "8", "--temp", "0", "-t", "1"}, args...))
		defer root.SetArgs(nil)
		err := root.Execute()
		return buf.String(), err
	}
	if out, err := run(tiny256, "--cache-type", "q8_0"); err != nil || len(out) <= len(" t1 t2") {
		t.Fatalf("q8_0: %q, %v", out, err)
	}
	for _, c := range []struct{ model, kv, want string }{
		{tiny256, "q4_0", `--cache-type "q4_0": want f16 or q8_0`},
		{stories, "q8_0", "this model's is 8"},
	} {
		if _, err := run(c.model, "--cache-type", c.kv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s --cache-type %s: %v, want %q", c.model, c.kv, err, c.want)
		}
	}
	run(tiny256, "--cache-type", "f16") // the flags persist on root between tests
}
