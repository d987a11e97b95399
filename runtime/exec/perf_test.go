package exec

import (
	"os"
	"strconv"
	"testing"

	"github.com/jitllm/jitllm/runtime/weights"
)

// benchModel is JITLLM_BENCH_MODEL (a real-sized model, e.g. jitllm synth
// --like llama-3.2-1b) or the shipped tiny Q4_K_M one, on
// JITLLM_BENCH_THREADS workers (default 2).
func benchModel(b *testing.B, opt Options) *Runner {
	path := os.Getenv("JITLLM_BENCH_MODEL")
	if path == "" {
		return load(b, "synthetic/tiny256-Q4_K_M.gguf", opt)
	}
	src, err := weights.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { src.Close() })
	m, err := Load(src)
	if err != nil {
		b.Fatal(err)
	}
	if opt.Threads == 0 {
		opt.Threads = 2
		if n, err := strconv.Atoi(os.Getenv("JITLLM_BENCH_THREADS")); err == nil && n > 0 {
			opt.Threads = n
		}
	}
	r, err := NewRunner(m, opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	return r
}

// BenchmarkPrefill64 and BenchmarkPrefill512 are one step of that many
// rows from an empty cache.
func BenchmarkPrefill64(b *testing.B)  { benchPrefill(b, 64) }
func BenchmarkPrefill512(b *testing.B) { benchPrefill(b, 512) }

func benchPrefill(b *testing.B, n int) {
	r := benchModel(b, Options{Context: n, MaxBatch: n})
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(1 + i*7%200)
	}
	if _, err := r.Forward(toks); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Truncate(0)
		if _, err := r.Forward(toks); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkDecode is one decode step after a short prompt.
func BenchmarkDecode(b *testing.B) {
	r := benchModel(b, Options{Context: 256})
	if _, err := r.Forward([]int32{1, 17, 300}); err != nil {
		b.Fatal(err)
	}
	tok := []int32{42}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r.Pos() >= r.Context()-1 {
			r.Truncate(3)
		}
		if _, err := r.Forward(tok); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}
