package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/jlm"
)

const (
	stories = "../../testdata/stories260K.gguf"
	tiny256 = "../../testdata/synthetic/tiny256-Q4_K_M.gguf" // head dim 64: whole q8_0 blocks
)

func TestConvertAndInspect(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "s.jlm")
	var buf bytes.Buffer
	if err := runConvert(context.Background(), &buf, false, []string{stories, out}); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, "converted 100%") || !strings.Contains(s, "wrote "+out) {
		t.Errorf("plain progress output:\n%s", s)
	}
	// Refuses to overwrite without -f, accepts with it (flag after the args).
	if err := runConvert(context.Background(), &buf, false, []string{stories, out}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second convert without -f: %v", err)
	}
	buf.Reset()
	if err := runConvert(context.Background(), &buf, true, []string{stories, out, "-f"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "\r[") {
		t.Errorf("terminal progress has no bar:\n%q", buf.String())
	}

	buf.Reset()
	if err := runInspect(&buf, []string{out, "-verify"}); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{"format:", "jlm version 1", "architecture:", "llama", "parameters:", "292800",
		"token_embd.weight", "[64, 512]", "tokenizer.ggml.tokens", "[512]string", "… (512 string)", "jlm.source.crc32c", "all checksums match"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect text lacks %q:\n%s", want, text)
		}
	}

	buf.Reset()
	if err := runInspect(&buf, []string{"-json", stories}); err != nil {
		t.Fatal(err)
	}
	var r inspectReport
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		t.Fatalf("inspect -json is not JSON: %v", err)
	}
	toks, _ := r.Metadata["tokenizer.ggml.tokens"].(map[string]any)
	if r.Format != "gguf" || r.Parameters != 292800 || len(r.Tensors) == 0 || toks["count"] != float64(512) {
		t.Errorf("inspect -json: format %q params %d tensors %d tokens %v", r.Format, r.Parameters, len(r.Tensors), toks)
	}
	buf.Reset()
	if err := runInspect(&buf, []string{"--json", "--meta-all", stories}); err != nil {
		t.Fatal(err)
	}
	r = inspectReport{}
	json.Unmarshal(buf.Bytes(), &r)
	if all, _ := r.Metadata["tokenizer.ggml.tokens"].([]any); len(all) != 512 {
		t.Errorf("-meta-all: %d tokens, want 512", len(all))
	}

	buf.Reset()
	if err := runInspect(&buf, []string{"-verify", stories}); err != nil || !strings.Contains(buf.String(), "no checksums") {
		t.Errorf("inspect -verify of a GGUF: %v\n%s", err, buf.String())
	}
}

func TestInspectVerifyFails(t *testing.T) {
	out := filepath.Join(t.TempDir(), "s.jlm")
	if err := runConvert(context.Background(), new(bytes.Buffer), false, []string{stories, out}); err != nil {
		t.Fatal(err)
	}
	f, err := jlm.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	off := f.Tensors[3].Offset + 5
	f.Close()
	b, _ := os.ReadFile(out)
	b[off] ^= 0xff
	os.WriteFile(out, b, 0o644)
	var buf bytes.Buffer
	err = runInspect(&buf, []string{out, "-verify"})
	if err == nil || !strings.Contains(err.Error(), "1 of") || !strings.Contains(buf.String(), "checksum mismatch") {
		t.Fatalf("corrupted tensor: err %v\n%s", err, buf.String())
	}
}

// The commands are registered on root and reachable the usual way.
func TestCommandsRegistered(t *testing.T) {
	out := filepath.Join(t.TempDir(), "s.jlm")
	var buf bytes.Buffer
	root.SetOut(&buf)
	root.SetArgs([]string{"convert", stories, out})
	defer root.SetArgs(nil)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	root.SetArgs([]string{"inspect", out, "-json"})
	buf.Reset()
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"format": "jlm"`) {
		t.Errorf("jitllm inspect -json output:\n%s", buf.String())
	}
	root.SetArgs([]string{"inspect", "a", "b"})
	if err := root.Execute(); err == nil {
		t.Error("inspect with two files: no error")
	}
}

// A directory with a config.json is a Hugging Face checkpoint: convert
// takes it (or its .safetensors file) down runtime/convert's ConvertHF,
// whose refusal of an unknown model_type shows it got there.
func TestConvertTakesHFCheckpoint(t *testing.T) {
	ck := t.TempDir()
	if err := os.WriteFile(filepath.Join(ck, "config.json"), []byte(`{"model_type": "no_such_family"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ck, "model.safetensors"), []byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.jlm")
	for _, in := range []string{ck, filepath.Join(ck, "model.safetensors")} {
		err := runConvert(context.Background(), io.Discard, false, []string{in, out})
		if err == nil || !strings.Contains(err.Error(), "no_such_family") {
			t.Errorf("convert %s: %v, want ConvertHF's model_type error", in, err)
		}
	}
	if err := runConvert(context.Background(), io.Discard, false, []string{ck, out, "-sha256"}); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("-sha256 on a checkpoint: %v", err)
	}
	if err := runConvert(context.Background(), io.Discard, false, []string{ck, out, "-type", "q4"}); err == nil || !strings.Contains(err.Error(), "matrix type") {
		t.Errorf("-type q4 on a checkpoint: %v", err)
	}
	if err := runConvert(context.Background(), io.Discard, false, []string{stories, out, "-type", "f16"}); err == nil || !strings.Contains(err.Error(), "-type") {
		t.Errorf("-type on a GGUF: %v", err)
	}
	dir := t.TempDir()
	if err := runConvert(context.Background(), io.Discard, false, []string{dir, out}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("a directory without config.json: %v", err)
	}
}
