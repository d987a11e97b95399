package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

func TestRunStories(t *testing.T) {
	src, err := weights.Open("../../testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	rep, err := Run(context.Background(), m, "stories", Config{Prompt: 32, Gen: 8, Depth: 16, Reps: 3, Threads: 1,
		Progress: func(test string, run int, tps float64) { runs = append(runs, test) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tests) != 2 || rep.Tests[0].Name != "pp32" || rep.Tests[1].Name != "tg8 @ d16" || len(runs) != 6 {
		t.Fatalf("tests %+v, runs %v", rep.Tests, runs)
	}
	for _, tt := range rep.Tests {
		if len(tt.Samples) != 3 || tt.Best <= 0 || tt.Best < tt.Mean || tt.SD < 0 {
			t.Errorf("%s: %+v", tt.Name, tt)
		}
		for _, s := range tt.Samples {
			if s > tt.Best {
				t.Errorf("%s: sample %v above the best %v", tt.Name, s, tt.Best)
			}
		}
	}
	if rep.Model != "llama 292.80K F32" || rep.Params != 292800 || rep.Size != 1171200 || rep.Threads != 1 || rep.MaxBatch != 32 {
		t.Errorf("report %+v", rep)
	}
	// decode reads every weight but the embedding table, of which one row,
	// unless the table is the output head too
	var want int64
	tied := true
	for _, w := range m.Weights {
		want += int64(len(w.Data))
		tied = tied && w.GGUF != "output.weight"
	}
	if e := m.Weights[embedWeight(m)]; !tied {
		want -= int64(len(e.Data)) - int64(len(e.Data))/e.Dims[1]
	}
	if rep.DecodeBytes != want || rep.Bandwidth != 0 {
		t.Errorf("decode bytes %d (tied embedding %v), want %d; bandwidth %v on the CPU runner", rep.DecodeBytes, tied, want, rep.Bandwidth)
	}
	var b bytes.Buffer
	if err := rep.Table(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "tg8 @ d16 reads "+FormatSize(want)+" of weights a token") {
		t.Errorf("table without decode's bytes:\n%s", b.String())
	}
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[1], "| ----") || !strings.Contains(lines[2], " pp32 |") || utf8.RuneCountInString(lines[0]) != utf8.RuneCountInString(lines[3]) {
		t.Errorf("table:\n%s", b.String())
	}
	if _, err := Run(context.Background(), m, "", Config{}); err == nil {
		t.Error("empty config accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, m, "", Config{Prompt: 8, Reps: 1}); err == nil {
		t.Error("cancelled run succeeded")
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{FormatCount(1235814400, " "), "1.24 B"}, {FormatCount(292800, ""), "292.80K"}, {FormatCount(12, " "), "12"},
		{FormatSize(799862784), "762.81 MiB"}, {FormatSize(1 << 31), "2.00 GiB"},
		{FileTypeName(15), "Q4_K - Medium"}, {FileTypeName(7), "Q8_0"}, {FileTypeName(999), "ftype 999"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}
