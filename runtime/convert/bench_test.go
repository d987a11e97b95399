//go:build unix

package convert

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/meta"
)

// BenchmarkConvert writes a 1.2 GiB GGUF, then times `cp` of it (plus an
// fsync of the copy, since Convert syncs too) and Convert of it to the same
// disk, best of three rounds each, and reports both rates and their ratio.
// Run it with `make bench-convert`.
func BenchmarkConvert(b *testing.B) {
	if testing.Short() {
		b.Skip("writes 1.2 GiB; skipped under -short")
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "big.gguf")
	size := writeBig(b, src)
	cpOut, convOut := filepath.Join(dir, "copy.gguf"), filepath.Join(dir, "big.jlm")
	b.ResetTimer()
	for range b.N {
		var cpBest, convBest, cpCPU, convCPU time.Duration
		for range 3 {
			// Remove old outputs untimed: freeing 1.2 GiB is not copying it.
			os.Remove(cpOut)
			os.Remove(convOut)
			d, cpu := timeIt(b, func() error { return cpSync(src, cpOut) })
			if cpBest == 0 || d < cpBest {
				cpBest, cpCPU = d, cpu
			}
			d, cpu = timeIt(b, func() error { return Convert(context.Background(), src, convOut, Options{}) })
			if convBest == 0 || d < convBest {
				convBest, convCPU = d, cpu
			}
		}
		cpRate := float64(size) / 1e6 / cpBest.Seconds()
		convRate := float64(size) / 1e6 / convBest.Seconds()
		b.ReportMetric(cpRate, "cp-MB/s")
		b.ReportMetric(convRate, "convert-MB/s")
		b.ReportMetric(convRate/cpRate, "ratio")
		b.ReportMetric(cpCPU.Seconds(), "cp-cpu-s")
		b.ReportMetric(convCPU.Seconds(), "convert-cpu-s")
		b.Logf("%.2f GB: cp+fsync %v (%.0f MB/s, %v CPU), convert %v (%.0f MB/s, %v CPU), ratio %.2f",
			float64(size)/1e9, cpBest, cpRate, cpCPU, convBest, convRate, convCPU, convRate/cpRate)
	}
}

// timeIt returns f's wall time and the CPU time (user+system) it cost this
// process and its children; on a loaded host the CPU time is the steadier
// figure.
func timeIt(b *testing.B, f func() error) (time.Duration, time.Duration) {
	c0 := cpuTime()
	t := time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	return time.Since(t), cpuTime() - c0
}

func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

func cpSync(src, dst string) error {
	if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
		return &exec.Error{Name: "cp " + string(out), Err: err}
	}
	f, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// writeBig writes Q8_0 and F16 matrices and a Q8_0 expert tensor of random
// bytes (fine for conversion, which never decodes) and syncs the file.
func writeBig(b *testing.B, path string) int64 {
	md := &meta.Map{}
	md.Set("general.architecture", meta.Str("bench"))
	var ts []gguf.WriteTensor
	add := func(name string, typ quant.Type, dims ...int64) {
		t := gguf.WriteTensor{Name: name, Type: typ, Dims: dims}
		n, err := t.Size()
		if err != nil {
			b.Fatal(err)
		}
		t.Data = random(uint64(len(ts)), n)
		ts = append(ts, t)
	}
	for i := range 4 {
		add("blk."+string(rune('0'+i))+".ffn_up.weight", quant.Q8_0, 8192, 16384)
	}
	add("blk.4.attn_q.weight", quant.F16, 8192, 16384)
	add("blk.5.attn_q.weight", quant.F16, 8192, 16384)
	add("blk.6.ffn_gate_exps.weight", quant.Q8_0, 2048, 1024, 64)
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := gguf.Write(f, md, ts); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	st, _ := f.Stat()
	return st.Size()
}

// random returns a Data function writing n pseudo-random bytes in 8 MiB
// chunks, so the benchmark itself stays small in memory.
func random(seed uint64, n int64) func(w io.Writer) error {
	return func(w io.Writer) error {
		rng := rand.NewChaCha8([32]byte{byte(seed), 1})
		buf := make([]byte, 8<<20)
		for left := n; left > 0; {
			k := min(left, int64(len(buf)))
			rng.Read(buf[:k])
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			left -= k
		}
		return nil
	}
}
