package gpuexec

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// The device's measured read bandwidth: what a decode step, which streams
// every weight once, is held against (jitllm speed reports decode's share
// of it). ops.ReadStream sums streamBytes in pieces of streamPiece, a CTA
// a piece; the best of streamReps launches counts.
const (
	streamBytes = 1 << 30   // far past any L2 (50 MB on the H200)
	streamPiece = 256 << 10 // four waves of CTAs over the H200's SMs
	streamReps  = 5
)

// ReadBandwidth is the bytes a second the runner's device reads.
func (r *Runner) ReadBandwidth() (float64, error) { return ReadBandwidth(r.c) }

// ReadBandwidth measures the bytes a second device context c reads from
// its memory: a stream of up to streamBytes (a quarter of the free memory
// where that is less), the best of streamReps launches after a warm-up.
func ReadBandwidth(c *cuda.Context) (float64, error) {
	free, _, err := c.MemInfo()
	if err != nil {
		return 0, err
	}
	n := min(uint64(streamBytes), free/4) / streamPiece * streamPiece
	if n < 64*streamPiece {
		return 0, fmt.Errorf("read bandwidth: %d bytes free, too few to measure", free)
	}
	pieces := int(n / streamPiece)
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	k := ops.ReadStream()
	src, err := ptx.Module([]*kernel.Kernel{k}, tg)
	if err != nil {
		return 0, err
	}
	mod, err := c.LoadPTX(src)
	if err != nil {
		return 0, err
	}
	defer mod.Unload()
	fn, err := mod.Function(k.Name)
	if err != nil {
		return 0, err
	}
	grid, block, shared, err := launchShape(k, tg, ptx.Elems(int(n)), ptx.Elems(pieces))
	if err != nil {
		return 0, err
	}
	w, err := c.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer w.Free()
	y, err := c.Alloc(4 * uint64(pieces))
	if err != nil {
		return 0, err
	}
	defer y.Free()
	if err := w.Zero(); err != nil {
		return 0, err
	}
	s, err := c.NewStream()
	if err != nil {
		return 0, err
	}
	defer s.Destroy()
	var ev [2]*cuda.Event
	for i := range ev {
		if ev[i], err = c.NewEvent(); err != nil {
			return 0, err
		}
		defer ev[i].Destroy()
	}
	a := cuda.NewArgs(4)
	for i, v := range []uint64{w.Ptr, n, y.Ptr, uint64(pieces)} {
		a.Set(i, v)
	}
	best := 0.0
	for i := range streamReps + 1 { // the first warms up
		if err := ev[0].Record(s); err != nil {
			return 0, err
		}
		if err := fn.Launch(grid, block, shared, s, a); err != nil {
			return 0, err
		}
		if err := ev[1].Record(s); err != nil {
			return 0, err
		}
		if err := ev[1].Synchronize(); err != nil {
			return 0, err
		}
		ms, err := ev[1].Since(ev[0])
		if err != nil {
			return 0, err
		}
		if i > 0 && ms > 0 {
			best = max(best, float64(n)/(float64(ms)/1000))
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("read bandwidth: no launch timed")
	}
	return best, nil
}
