package gpuexec

import (
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// ReadStream's loop reads whole 16-byte chunks, four a trip: a stream of
// narrower loads would measure the load issue, not the memory.
func TestReadStreamRendersVectorLoads(t *testing.T) {
	src, err := ptx.Module([]*kernel.Kernel{ops.ReadStream()}, ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	if v4, narrow := strings.Count(src, "ld.global.v4.u32"), strings.Count(src, "ld.global.u32"); v4 < 4 || narrow > 0 {
		t.Fatalf("ReadStream: %d 16-byte loads (want 4 or more: the unrolled trip and the rest) and %d 4-byte ones (want 0)", v4, narrow)
	}
}

// The measured read bandwidth is positive and under the device's
// theoretical peak.
func TestGPUReadBandwidth(t *testing.T) {
	needGPU(t)
	c, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bw, err := ReadBandwidth(c)
	if err != nil {
		t.Fatal(err)
	}
	peak := c.Device.PeakBandwidth()
	t.Logf("%s: read %.1f GB/s, %.0f%% of the %.1f GB/s peak", c.Device.Name, bw/1e9, 100*bw/peak, peak/1e9)
	if bw <= 0 || (peak > 0 && bw > 1.02*peak) {
		t.Fatalf("read bandwidth %.1f GB/s against a peak of %.1f", bw/1e9, peak/1e9)
	}
}
