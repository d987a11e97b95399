package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBatchJSON runs 1 and 2 streams on stories260K and checks -json's
// shape: one run per stream count with positive figures, the one-stream
// ratio 1, one sample per run.
func TestBatchJSON(t *testing.T) {
	var out, log bytes.Buffer
	if err := runBatch(context.Background(), &out, &log, []string{stories, "-streams", "1,2", "-p", "8", "-n", "6", "-r", "2", "-threads", "1", "-tune", "off", "-json"}); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Model   string           `json:"model"`
		Backend string           `json:"backend"`
		Threads int              `json:"threads"`
		Reps    int              `json:"reps"`
		Load    []float64        `json:"loadavg_start"`
		Runs    []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if rep.Model != "llama 292.80K F32" || rep.Backend != "CPU" || rep.Threads != 1 || rep.Reps != 2 || len(rep.Load) != 3 || len(rep.Runs) != 2 {
		t.Fatalf("report: %s", out.String())
	}
	for i, r := range rep.Runs {
		if r["streams"] != float64(i+1) || r["n_prompt"] != float64(8) || r["n_gen"] != float64(6) {
			t.Errorf("run %d: %v", i, r)
		}
		for _, k := range []string{"decode_ts", "decode_ts_per_stream", "prefill_ts", "ttft_ms_mean", "ttft_ms_max", "ratio_to_1", "decode_rows_per_step"} {
			if v, _ := r[k].(float64); v <= 0 {
				t.Errorf("run %d: %s = %v", i, k, r[k])
			}
		}
		if s, _ := r["samples_decode_ts"].([]any); len(s) != 2 {
			t.Errorf("run %d: samples %v, want 2", i, r["samples_decode_ts"])
		}
	}
	if rep.Runs[0]["ratio_to_1"] != float64(1) {
		t.Errorf("one stream's ratio %v", rep.Runs[0]["ratio_to_1"])
	}
	// A step carries at most every stream's row (on a model this small
	// one stream may finish before the other starts: not always 2).
	if v := rep.Runs[1]["decode_rows_per_step"].(float64); v < 1 || v > 2 {
		t.Errorf("2 streams: %.2f rows per decode step", v)
	}
}

func TestBatchPromptsFileAndTable(t *testing.T) {
	f := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(f, []byte("Once upon a time there was a little girl\n\nThe big dog ran to the park to play\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	if err := runBatch(context.Background(), &out, &log, []string{"-prompts", f, "-streams", "2", "-p", "6", "-n", "3", "-r", "1", "-threads", "1", "-tune", "off", stories}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"| model ", "| streams |", "| llama 292.80K F32 | CPU ", "load average"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if err := runBatch(context.Background(), &out, &log, []string{"-prompts", f, "-p", "64", "-n", "3", stories}); err == nil || !strings.Contains(err.Error(), "fewer than the 64") {
		t.Errorf("short prompts: %v", err)
	}
}

func TestBatchRejects(t *testing.T) {
	var out, log bytes.Buffer
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{stories, "-streams", "1,x"}, `"x" is not a stream count`},
		{[]string{stories, "-streams", "0"}, "not a stream count in 1..64"},
		{[]string{stories, "-streams", "1000"}, "not a stream count in 1..64"},
		{[]string{stories, "-streams", "2,2"}, "listed twice"},
		{[]string{stories, "-r", "0"}, "at least one run"},
		{[]string{stories, "--cache-type", "bf16"}, `--cache-type "bf16": want f16 or q8_0`},
		{[]string{stories, "-n", "1"}, "generated tokens 1"},
		{[]string{stories, "-p", "100000"}, "prompt tokens 100000"},
		{[]string{stories, "-streams", "64", "-p", "4000", "-n", "4000"}, "KV positions"},
		{[]string{stories, "-streams", "1", "-p", "2000", "-n", "100"}, "exceed the model's context of 2048"},
		{[]string{stories, "-prompts", "/nonexistent/prompts.txt"}, "no such file"},
		{[]string{}, "one MODEL"},
	} {
		if err := runBatch(context.Background(), &out, &log, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
