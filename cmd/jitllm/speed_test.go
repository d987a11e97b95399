package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/runtime/synth"
)

// TestSpeedJSON checks speed -json's schema on stories260K: one object per
// test with the table's fields, positive figures, one sample per run.
func TestSpeedJSON(t *testing.T) {
	var out, log bytes.Buffer
	if err := runSpeed(context.Background(), &out, &log, []string{stories, "-p", "16", "-n", "4", "-r", "2", "-threads", "1", "-json"}); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want pp16 and tg4", len(rows))
	}
	for i, want := range []string{"pp16", "tg4"} {
		r := rows[i]
		for _, k := range []string{"model", "file", "size", "params", "backend", "threads", "test", "t_s", "avg_ts", "stddev_ts",
			"samples_ts", "n_prompt", "n_gen", "n_depth", "n_batch", "type_kv", "cores", "loadavg_start", "loadavg_end"} {
			if _, ok := r[k]; !ok {
				t.Errorf("row %d lacks %q", i, k)
			}
		}
		if r["test"] != want || r["backend"] != "CPU" || r["threads"] != float64(1) || r["params"] != float64(292800) || r["type_kv"] != "f16" ||
			r["size"] != float64(1171200) || r["model"] != "llama 292.80K F32" {
			t.Errorf("row %d: %v", i, r)
		}
		if ts, _ := r["t_s"].(float64); ts <= 0 {
			t.Errorf("row %d: t_s %v", i, r["t_s"])
		}
		if s, _ := r["samples_ts"].([]any); len(s) != 2 {
			t.Errorf("row %d: samples %v, want 2", i, r["samples_ts"])
		}
	}
	if rows[0]["n_prompt"] != float64(16) || rows[1]["n_gen"] != float64(4) {
		t.Errorf("counts: %v %v", rows[0]["n_prompt"], rows[1]["n_gen"])
	}
}

func TestSpeedTable(t *testing.T) {
	var out, log bytes.Buffer
	if err := runSpeed(context.Background(), &out, &log, []string{"-p", "8", "-n", "2", "-r", "1", "-d", "4", stories}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"| model ", "| t/s (best) |", "| llama 292.80K F32 | 1.12 MiB | 292.80 K | CPU ", " pp8 |", " tg2 @ d4 |", "load average"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

func TestSpeedRejects(t *testing.T) {
	var out, log bytes.Buffer
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{stories, "-devices", "vulkan"}, "unknown device"},
		{[]string{stories, "-devices", "cpu,tpu"}, "unknown device \"tpu\""},
		{[]string{stories, "-devices", "cpu,,cpu"}, "an empty entry"},
		{[]string{stories, "-r", "0"}, "-r ≥ 1"},
		{[]string{stories, "-p", "0", "-n", "0"}, "nothing to run"},
		{[]string{stories, "-cache-type", "q4_0"}, `--cache-type "q4_0": want f16 or q8_0`},
		{[]string{stories, "--cache-type", "q8_0"}, "head dim that is a multiple of 32"},
		{[]string{tiny256, "--cache-type", "q8_0", "-devices", "cuda"}, "the CUDA runner keeps an f16 KV cache"},
		{[]string{}, "one MODEL"},
	} {
		if err := runSpeed(context.Background(), &out, &log, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// speed --cache-type q8_0 runs the q8_0 cache and says so.
func TestSpeedCacheType(t *testing.T) {
	var out, log bytes.Buffer
	if err := runSpeed(context.Background(), &out, &log, []string{tiny256, "-p", "8", "-n", "2", "-r", "1", "--cache-type", "q8_0", "-json"}); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 || rows[0]["type_kv"] != "q8_0" {
		t.Fatalf("%v: %s", err, out.String())
	}
	out.Reset()
	if err := runSpeed(context.Background(), &out, &log, []string{tiny256, "-p", "8", "-n", "0", "-r", "1", "--cache-type=q8_0"}); err != nil || !strings.Contains(out.String(), "KV cache q8_0") {
		t.Fatalf("%v:\n%s", err, out.String())
	}
}

// TestSynthCommand writes a one-block llama-3.2-1b at Q8_0 and times it.
func TestSynthCommand(t *testing.T) {
	synthVocab = 1024
	defer func() { synthVocab = 0 }()
	out := filepath.Join(t.TempDir(), "s.gguf")
	var buf bytes.Buffer
	if err := runSynth(context.Background(), &buf, []string{"--like", "llama-3.2-1b", "--type", "q8_0", "--layers", "1", "-o", out, "--seed", "5"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "wrote "+out+": llama-3.2-1b Q8_0 (1 of 16 layers), 11 tensors") {
		t.Errorf("output:\n%s", buf.String())
	}
	var log bytes.Buffer
	buf.Reset()
	if err := runSpeed(context.Background(), &buf, &log, []string{out, "-p", "4", "-n", "2", "-r", "1", "-json"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"model": "llama 1B Q8_0"`) {
		t.Errorf("speed on the synthetic file:\n%s", buf.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "q8_0", "-o", out}, "needs --like"},
		{[]string{"--like", "llama-3.2-1b", "-o", out}, "needs --type"},
		{[]string{"--like", "llama-3.2-1b", "--type", "q8_0"}, "needs -o"},
		{[]string{"--like", "mistral-7b", "--type", "q8_0", "-o", out}, "no preset"},
		{[]string{"--like", "llama-3.2-1b", "--type", "q5_k_s", "-o", out}, "unknown type"},
		{[]string{"--like", "llama-3.2-1b", "--type", "q8_0", "--layers", "17", "-o", out}, "has 16"},
	} {
		if err := runSynth(context.Background(), &buf, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	// Every preset runs: qwen3 too (per-head q/k norms).
	buf.Reset()
	q := filepath.Join(t.TempDir(), "q.gguf")
	if err := runSynth(context.Background(), &buf, []string{"--like", "qwen3-0.6b", "--type", "q8_0", "--layers", "1", "-o", q}); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := runSpeed(context.Background(), &buf, &log, []string{q, "-p", "4", "-n", "2", "-r", "1", "-json"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"model": "qwen3 0.6B Q8_0"`) {
		t.Errorf("speed on the qwen3 file:\n%s", buf.String())
	}
	for _, like := range synth.Presets() {
		s, _ := synth.Like(like)
		if !slices.Contains(dsl.Architectures(), s.Arch) {
			t.Errorf("preset %s is architecture %q, which has no graph (have %v)", like, s.Arch, dsl.Architectures())
		}
	}
}
