package devices

import (
	"errors"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

func TestResolve(t *testing.T) {
	for spec, want := range map[string]string{"": "cpu", "cpu": "cpu", "cuda": "cuda", "cuda:0": "cuda"} {
		if got, err := Resolve(spec); err != nil || got != want {
			t.Errorf("%q: %q, %v", spec, got, err)
		}
	}
	for _, bad := range []string{"tpu", "cuda:1", "cuda:0,cuda:1"} {
		if _, err := Resolve(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	auto, err := Resolve("auto")
	if err != nil {
		t.Fatal(err)
	}
	if cuda.Load() != nil && auto != "cpu" {
		t.Errorf("auto without a driver chose %s", auto)
	}
}

func TestNewRunner(t *testing.T) {
	src, err := weights.Open("../../testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	r, name, err := NewRunner(m, "cpu", exec.Options{Threads: 1})
	if err != nil || name != "CPU" {
		t.Fatalf("cpu: %v %q", err, name)
	}
	if _, err := r.Forward([]int32{1, 403}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	_, _, err = NewRunner(m, "cuda", exec.Options{})
	if cuda.Load() != nil {
		if !errors.Is(err, cuda.ErrNoDriver) || !strings.Contains(err.Error(), "-devices cuda") {
			t.Fatalf("cuda without a driver: %v", err)
		}
	}
}

func TestParseLists(t *testing.T) {
	for spec, want := range map[string]string{"": "cpu", "cpu": "cpu", "cuda": "cuda:0", "cuda:1": "cuda:1", "cpu,cuda:0": "cpu cuda:0", "cuda:0,cuda:1": "cuda:0 cuda:1"} {
		ids, auto, err := Parse(spec)
		if err != nil || auto || strings.Join(ids, " ") != want {
			t.Errorf("%q: %v %v %v", spec, ids, auto, err)
		}
	}
	if _, auto, err := Parse("auto"); !auto || err != nil {
		t.Errorf("auto: %v %v", auto, err)
	}
	for _, bad := range []string{"tpu", "cpu,,cuda:0", "cuda:x"} {
		if _, _, err := Parse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A list of devices runs the model as a runtime/sched pipeline.
func TestNewRunnerSplit(t *testing.T) {
	src, err := weights.Open("../../testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	opt := exec.Options{Threads: 1, Context: 32, MaxBatch: 4}
	one, _, err := NewRunner(m, "cpu", opt)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	split, name, err := NewRunner(m, "cpu,cpu", opt)
	if err != nil {
		t.Fatal(err)
	}
	defer split.Close()
	if !strings.HasPrefix(name, "split cpu[0-") {
		t.Errorf("backend %q", name)
	}
	toks := []int32{1, 403, 407, 261, 378, 286, 310}
	a, err := one.Forward(toks)
	if err != nil {
		t.Fatal(err)
	}
	b, err := split.Forward(toks)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("logit %d: split %v, one device %v", i, b[i], a[i])
		}
	}
	if cuda.Load() != nil {
		if _, _, err := NewRunner(m, "cpu,cuda:0", opt); !errors.Is(err, cuda.ErrNoDriver) {
			t.Errorf("cpu,cuda:0 without a driver: %v", err)
		}
	}
}

// A q8_0 cache reaches every CPU stage of a pipeline (a split over two
// CPU stages computes one CPU runner's bits, not the f16 cache's), and a
// CUDA device asked for it is refused rather than given an f16 cache.
func TestNewRunnerKVType(t *testing.T) {
	src, err := weights.Open("../../testdata/synthetic/tiny256-Q4_K_M.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 403, 407, 261, 378, 286, 310}
	logits := func(spec, kv string) []float32 {
		r, _, err := NewRunner(m, spec, exec.Options{Threads: 1, Context: 32, MaxBatch: 4, KVType: kv})
		if err != nil {
			t.Fatalf("%s %s: %v", spec, kv, err)
		}
		defer r.Close()
		out, err := r.Forward(toks)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), out...)
	}
	one, split, f16 := logits("cpu", exec.KVQ8_0), logits("cpu,cpu", exec.KVQ8_0), logits("cpu", exec.KVF16)
	same := func(a, b []float32) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	if !same(one, split) || same(one, f16) {
		t.Errorf("q8_0: split equals one runner %v, one runner equals f16 %v", same(one, split), same(one, f16))
	}
	for _, spec := range []string{"cuda", "cuda:1", "cpu,cuda:0"} {
		_, _, err := NewRunner(m, spec, exec.Options{KVType: exec.KVQ8_0})
		if err == nil || !strings.Contains(err.Error(), "f16 KV cache") || !strings.Contains(err.Error(), "runs on cpu") {
			t.Errorf("%s with q8_0: %v", spec, err)
		}
	}
	if _, _, err := NewRunner(m, "cpu", exec.Options{KVType: "q4_0"}); err == nil || !strings.Contains(err.Error(), "q4_0") {
		t.Errorf("an unknown cache type: %v", err)
	}
}
