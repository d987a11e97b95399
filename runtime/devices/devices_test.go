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
