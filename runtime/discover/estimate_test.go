package discover

import (
	"runtime"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

// measure loads path for real and returns what it took: the heap growth of
// exec.Load + exec.NewRunner plus the bytes of the bound weights, which are
// outside the heap on unix whether mapped from the file or copied by the
// runner (mmap.Anon).
func measure(t *testing.T, src weights.Source, opt Options) (int64, *exec.Runner) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	r, err := exec.NewRunner(m, exec.Options{Threads: 1, Context: opt.Context, MaxBatch: opt.MaxBatch, KVType: opt.KVType})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	var mapped int64
	for _, b := range m.Weights {
		mapped += int64(len(b.Data))
	}
	runtime.KeepAlive(m)
	return heap + mapped, r
}

func TestEstimateMatchesRealLoad(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("weights are read into the Go heap here, which measure counts twice")
	}
	cases := []struct {
		path string
		opt  Options
	}{
		{"../../testdata/stories260K.gguf", Options{}},
		{"../../testdata/stories260K.gguf", Options{Context: 4096, MaxBatch: 1024}},
		{"../../testdata/stories260K.gguf", Options{Context: 256, MaxBatch: 1}},
		{"../../testdata/synthetic/tiny256-Q8_0.gguf", Options{}},
		{"../../testdata/synthetic/tiny256-Q8_0.gguf", Options{Context: 1024, MaxBatch: 64}},
		{"../../testdata/synthetic/tiny256-Q8_0.gguf", Options{Context: 4096, MaxBatch: 64, KVType: exec.KVQ8_0}},
	}
	for _, c := range cases {
		src, err := weights.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		g, err := dsl.Build(srcEnv{src})
		if err != nil {
			t.Fatal(err)
		}
		est, err := EstimateMemory(g, src, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		got, r := measure(t, src, Options{Context: est.Context, MaxBatch: est.MaxBatch, KVType: c.opt.KVType})
		if r.Context() != est.Context {
			t.Errorf("%s: estimate assumes %d positions, exec planned %d", c.path, est.Context, r.Context())
		}
		if est.KV != r.KVBytes() {
			t.Errorf("%s %s: estimate's KV %d bytes, the runner's %d", c.path, est.KVType, est.KV, r.KVBytes())
		}
		r.Close()
		src.Close()
		diff := est.Load() - got
		slack := max(got/10, 1<<20)
		t.Logf("%s ctx=%d batch=%d: estimate %d (weights %d kv %d act %d graph %d), measured %d, diff %+d",
			c.path, est.Context, est.MaxBatch, est.Load(), est.Weights, est.KV, est.Activations, est.Graph, got, diff)
		if diff > slack || -diff > slack {
			t.Errorf("%s ctx=%d batch=%d: estimate %s, a real load measures %s (off by more than %s)",
				c.path, est.Context, est.MaxBatch, GiB(est.Load()), GiB(got), GiB(slack))
		}
		// Beyond the weights the estimate must hold on its own, too: a
		// forgotten buffer hides easily under the weights.
		if rest, mrest := est.Load()-est.Weights, got-est.Weights; mrest > 4<<20 {
			if d := rest - mrest; d > mrest/10 || -d > mrest/10 {
				t.Errorf("%s ctx=%d batch=%d: KV+activations estimate %s, measured %s", c.path, est.Context, est.MaxBatch, GiB(rest), GiB(mrest))
			}
		}
	}
}
