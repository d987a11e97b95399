package exec

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/tune"
)

func quantType(t *testing.T, name string) quant.Type {
	q, ok := quant.ParseType(name)
	if !ok {
		t.Fatalf("type %q", name)
	}
	return q
}

// run feeds a prompt then a few decode steps, returning every step's logits.
func runSteps(t *testing.T, r *Runner, prompt []int32, steps int) [][]float32 {
	t.Helper()
	var out [][]float32
	logits, err := r.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		out = append(out, append([]float32(nil), logits...))
		if i == steps {
			return out
		}
		if logits, err = r.Forward([]int32{argmax(logits)}); err != nil {
			t.Fatal(err)
		}
	}
}

// A tuned runner computes the same logits, bit for bit, as an untuned one:
// tuning moves only block sizes and worker counts, never a dot product's
// order. It also writes its choices, which the next runner reads back.
func TestTuneKeepsResults(t *testing.T) {
	prompt := []int32{1, 17, 200, 51, 9, 44, 81, 3, 200}
	for _, model := range []string{"stories260K.gguf", "synthetic/tiny256-Q4_K_M.gguf", "synthetic/tiny256-Q8_0.gguf"} {
		t.Run(model, func(t *testing.T) {
			want := runSteps(t, load(t, model, Options{}), prompt, 6)
			dir := t.TempDir()
			for _, mode := range []tune.Mode{tune.Quick, tune.Full, tune.Quick} {
				r := load(t, model, Options{Tune: mode, TuneDir: dir})
				got := runSteps(t, r, prompt, 6)
				for s := range want {
					for j := range want[s] {
						if math.Float32bits(got[s][j]) != math.Float32bits(want[s][j]) {
							t.Fatalf("tune %s, step %d logit %d: %v, untuned %v", mode, s, j, got[s][j], want[s][j])
						}
					}
				}
			}
			files, _ := filepath.Glob(filepath.Join(dir, "tune-*.json"))
			if len(files) != 1 {
				t.Fatalf("cache files %v, want one", files)
			}
			if c := tune.At(dir); c.Len() == 0 {
				t.Fatal("no choices recorded")
			}
			b, _ := os.ReadFile(files[0])
			if len(b) == 0 {
				t.Fatal("empty cache file")
			}
			// the native K-quant decode rows kernels' prefetch distance is
			// a choice (the Go kernels have no Rows: nothing to choose)
			var f struct{ Choices map[string]tune.Params }
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatal(err)
			}
			for shape, p := range f.Choices {
				native := !strings.Contains(shape, "/go/") && strings.Contains(shape, "_K/")
				if native && strings.HasSuffix(shape, "/m1") && p.Prefetch <= 0 {
					t.Errorf("%s: no prefetch distance chosen (%+v)", shape, p)
				}
			}
		})
	}
}

// Once a shape's choice is cached, a new runner uses it without measuring.
func TestTuneUsesCache(t *testing.T) {
	dir := t.TempDir()
	prompt := []int32{1, 17, 200, 51, 9}
	first := load(t, "stories260K.gguf", Options{Tune: tune.Quick, TuneDir: dir})
	for range tune.Quick.Rounds() { // a measurement spans this many calls of each shape
		first.Truncate(0)
		runSteps(t, first, prompt, 2)
	}
	r := load(t, "stories260K.gguf", Options{Tune: tune.Quick, TuneDir: dir})
	runSteps(t, r, prompt, 2)
	for _, m := range r.matmuls {
		if m.measured != 0 {
			t.Fatalf("%s: measured %d times with every choice cached", m.w.GGUF, m.measured)
		}
	}
	if r.matmuls[0].measured != 0 || !r.matmuls[0].tuned[0].ready {
		t.Fatal("decode class not tuned")
	}
}

// Kernels says which order and ISA each matmul ran, for both row classes,
// and only claims a run that happened.
func TestKernelsReportWhichRan(t *testing.T) {
	r := load(t, "synthetic/tiny256-Q4_K_M.gguf", Options{})
	if _, err := r.Forward([]int32{1}); err != nil {
		t.Fatal(err)
	}
	ks := r.Kernels()
	if len(ks) != 2*len(r.matmuls) || len(ks) == 0 {
		t.Fatalf("%d kernel entries for %d matmuls", len(ks), len(r.matmuls))
	}
	for _, k := range ks {
		if k.Order == "" || k.ISA == "" || k.Weight == "" || k.Tile[0] < 1 || k.Tile[1] < 1 {
			t.Fatalf("incomplete %+v", k)
		}
		if k.Rows == "batch" && k.Ran {
			t.Fatalf("%s: batch kernel ran in a one-row step", k.Weight)
		}
		if k.Rows == "1" && !k.Ran {
			t.Fatalf("%s: one-row kernel did not run", k.Weight)
		}
		one, many := MatMulKernels(quantType(t, k.Type), 256, 256)
		if k.Type == "Q6_K" && (one.Order != k.Order || many.Order != k.Order) {
			t.Fatalf("MatMulKernels says %s/%s, the runner ran %s", one.Order, many.Order, k.Order)
		}
	}
}
