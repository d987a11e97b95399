package gpuexec

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/synth"
	"github.com/jitllm/jitllm/runtime/weights"
)

// The estimate covers at least the weights and the f16 KV cache.
func TestEstimateCoversWeightsAndKV(t *testing.T) {
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	est, err := EstimateBytes(m, 256)
	if err != nil {
		t.Fatal(err)
	}
	var w int64
	for _, b := range m.Weights {
		w += int64(len(b.Data))
	}
	kv := int64(2 * 2 * 256 * 2 * 64 * 2) // K and V × layers × ctx × kv_dim × f16
	if est < DeviceOverhead+w+kv-w/10 {   // norm weights are held as f32 there, the rest as stored
		t.Fatalf("estimate %d below overhead + weights %d + KV %d", est, w, kv)
	}
	t.Logf("estimate %d bytes: weights %d, KV %d", est, w, kv)
	// shared: the weights (and the overhead); each runner's own: the KV
	shared, own, err := EstimateShared(m, 256)
	if err != nil {
		t.Fatal(err)
	}
	if shared+own != est || shared < DeviceOverhead+w-w/10 || shared > DeviceOverhead+2*w || own < kv {
		t.Errorf("shared %d + own %d (estimate %d): want the weights %d shared and the KV %d own", shared, own, est, w, kv)
	}
}

// On a GPU, the estimate is within 10% of the device memory NewRunner
// really takes, on a real-shaped model (llama-3.2-1b, Q4_K_M, from synth).
func TestGPUEstimateMatchesMeasured(t *testing.T) {
	needGPU(t)
	c, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := filepath.Join(t.TempDir(), "l1b.gguf")
	sh, err0 := synth.Like("llama-3.2-1b")
	if err0 != nil {
		t.Fatal(err0)
	}
	if _, err := synth.Write(context.Background(), path, synth.Options{Shape: sh, Type: synth.Q4_K_M, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	src, err := weights.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	const ctx = 2048
	est, err := EstimateBytes(m, ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, _, err := c.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(m, exec.Options{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	after, _, err := c.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	// the resident f16 prefill weights are what the device had room for
	// beyond the estimate (residentF16Budget), not part of it
	var resident int64
	for _, l := range r.p.setup {
		resident += allocSize(r.p.allocs[l.args[1].(view).a])
	}
	used := int64(before-after) - resident
	ratio := float64(est) / float64(used)
	t.Logf("estimate %.1f MiB, measured %.1f MiB beside %.1f MiB of resident f16 weights (ratio %.3f)", float64(est)/(1<<20), float64(used)/(1<<20), float64(resident)/(1<<20), ratio)
	if ratio < 0.9 || ratio > 1.1 {
		t.Fatalf("estimate %d bytes is not within 10%% of the measured %d", est, used)
	}
}
