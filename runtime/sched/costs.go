package sched

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/discover"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gpuexec"
)

// CostsOf counts m's parts for a KV cache of context positions: each
// block's weights (those declared in it) and f16 KV cache, the weights
// read before the first block (Head) and after the last (Tail). A weight
// outside the blocks that the blocks read (rope frequencies) goes to every
// stage's fixed part, so it is not counted here; a tied embedding counts
// in both Head and Tail (on a GPU both stages upload it).
func CostsOf(m *exec.Model, context int) (Costs, error) {
	g := m.Graph
	starts, err := g.BlockStarts()
	if err != nil {
		return Costs{}, err
	}
	L := g.Layers
	end := 0 // one past the last node of the last block
	for i, n := range g.Nodes {
		if n.Layer == L-1 {
			end = i + 1
		}
	}
	c := Costs{Blocks: make([]int64, L), Work: make([]float64, L)}
	size := func(wi int) int64 { return int64(len(m.Weights[wi].Data)) }
	for wi, w := range g.Weights {
		if w.Layer >= 0 && w.Layer < L {
			c.Blocks[w.Layer] += size(wi)
			c.Work[w.Layer] += float64(size(wi))
		}
	}
	head, tail := map[int]bool{}, map[int]bool{}
	for i, n := range g.Nodes {
		for _, wi := range []int{n.Weight, n.Bias, n.Rope.FreqsW} {
			if wi < 0 || g.Weights[wi].Layer >= 0 {
				continue
			}
			switch {
			case i < starts[0]:
				head[wi] = true
			case i >= end:
				tail[wi] = true
			}
		}
		if n.Op == dsl.OpAttention && n.Layer >= 0 && n.Layer < L {
			c.Blocks[n.Layer] += 2 * int64(context) * int64(n.Attn.KVHeads*n.Attn.HeadDim) * 2
		}
	}
	for wi := range head {
		c.Head += size(wi)
	}
	for wi := range tail {
		c.Tail += size(wi)
		c.TailWork += float64(size(wi))
	}
	return c, nil
}

// whole is what c counts for the whole model.
func (c Costs) whole() int64 {
	n := c.Head + c.Tail
	for _, b := range c.Blocks {
		n += b
	}
	return n
}

// Estimate is the memory stage model sm takes on a device of kind: the
// backend's own estimate (gpuexec.EstimateBytes; discover.EstimateMemory
// on the CPU, counting only the weights the stage reads).
func Estimate(kind string, sm *exec.Model, context, rows int) (int64, error) {
	switch kind {
	case "cuda":
		return gpuexec.EstimateBytes(sm, context)
	case "cpu":
		e, err := discover.EstimateMemory(sm.Graph, sm.Src, discover.Options{Context: context, MaxBatch: rows})
		if err != nil {
			return 0, err
		}
		n := e.Load() - e.Weights
		for _, wi := range sm.Graph.WeightsUsed() {
			n += int64(len(sm.Weights[wi].Data))
		}
		return n, nil
	}
	return 0, fmt.Errorf("no backend for device kind %q", kind)
}

// SetFixed sets each device's Fixed: its backend's estimate of the whole
// model less what c counts, the part any stage takes.
func SetFixed(c Costs, m *exec.Model, devs []Device, context, rows int) error {
	fixed := map[string]int64{}
	for i := range devs {
		f, ok := fixed[devs[i].Kind]
		if !ok {
			est, err := Estimate(devs[i].Kind, m, context, rows)
			if err != nil {
				return fmt.Errorf("%s: %w", devs[i].ID, err)
			}
			f = max(est-c.whole(), 0)
			fixed[devs[i].Kind] = f
		}
		devs[i].Fixed = f
	}
	return nil
}

// ParseList splits a -devices list ("cuda:0,cuda:1", "cpu,cuda:0") into
// device ids; "cuda" is cuda:0. Ids may repeat (two stages on one device).
func ParseList(spec string) ([]string, error) {
	var ids []string
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "cpu":
		case f == "cuda":
			f = "cuda:0"
		case strings.HasPrefix(f, "cuda:"):
			n, err := strconv.Atoi(f[len("cuda:"):])
			if err != nil || n < 0 || n > 1023 {
				return nil, fmt.Errorf("device %q: want cuda:N with N a device ordinal", f)
			}
			f = "cuda:" + strconv.Itoa(n)
		case f == "":
			return nil, fmt.Errorf("-devices %q: an empty entry", spec)
		default:
			return nil, fmt.Errorf("unknown device %q (want cpu or cuda:N)", f)
		}
		ids = append(ids, f)
	}
	if len(ids) > 64 {
		return nil, fmt.Errorf("-devices lists %d devices; at most 64", len(ids))
	}
	return ids, nil
}

// Devices describes the devices ids name: free memory from the host and
// the driver, speed measured (CPUSpeed, gpuSpeed; where a GPU's
// measurement fails, 80% of the peak its memory clock and bus width give).
func Devices(ids []string) ([]Device, error) {
	var gpus []cuda.Info
	var host *discover.Host
	out := make([]Device, 0, len(ids))
	for _, id := range ids {
		if id == "cpu" {
			if host == nil {
				h := discover.HostInfo()
				host = &h
			}
			out = append(out, Device{ID: "cpu", Kind: "cpu", Free: int64(host.MemAvailable), Speed: CPUSpeed()})
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(id, "cuda:"))
		if err != nil || !strings.HasPrefix(id, "cuda:") {
			return nil, fmt.Errorf("device %q: want cpu or cuda:N", id)
		}
		if gpus == nil {
			if gpus, err = cuda.Devices(); err != nil {
				return nil, fmt.Errorf("device %s: %w", id, err)
			}
		}
		if n >= len(gpus) {
			return nil, fmt.Errorf("device %s: the driver sees %d CUDA devices", id, len(gpus))
		}
		c, err := cuda.Open(n)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", id, err)
		}
		free, _, err := c.MemInfo()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("device %s: %w", id, err)
		}
		speed := gpuSpeed(c, free)
		c.Close()
		if speed <= 0 {
			speed = 0.8 * gpus[n].PeakBandwidth()
		}
		out = append(out, Device{ID: id, Kind: "cuda", Ordinal: n, Free: int64(free), Speed: speed})
	}
	return out, nil
}

var cpuSpeed struct {
	once sync.Once
	v    float64
}

// CPUSpeed is the host's measured read bandwidth in bytes/s: every core
// summing its share of a 64 MiB buffer, the best of three passes (measured
// once per process).
func CPUSpeed() float64 {
	cpuSpeed.once.Do(func() {
		const n = 16 << 20 // float32s
		buf := make([]float32, n)
		for i := range buf {
			buf[i] = float32(i & 7)
		}
		workers := runtime.GOMAXPROCS(0)
		best := time.Duration(1 << 62)
		sums := make([]float32, workers)
		for pass := 0; pass < 3; pass++ {
			t0 := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					var s0, s1, s2, s3 float32
					part := buf[w*n/workers : (w+1)*n/workers]
					for i := 0; i+4 <= len(part); i += 4 {
						s0 += part[i]
						s1 += part[i+1]
						s2 += part[i+2]
						s3 += part[i+3]
					}
					sums[w] = s0 + s1 + s2 + s3
				}(w)
			}
			wg.Wait()
			best = min(best, time.Since(t0))
		}
		cpuSpeed.v = 4 * n / max(best.Seconds(), 1e-6)
	})
	return cpuSpeed.v
}

// gpuSpeed is a GPU's measured memory bandwidth in bytes/s: a memset of
// up to 256 MiB (a quarter of the free memory at most), the best of three;
// 0 when it cannot be measured.
func gpuSpeed(c *cuda.Context, free uint64) float64 {
	n := min(uint64(256<<20), free/4)
	if n < 1<<20 {
		return 0
	}
	b, err := c.Alloc(n)
	if err != nil {
		return 0
	}
	defer b.Free()
	best := time.Duration(1 << 62)
	for pass := 0; pass < 3; pass++ {
		t0 := time.Now()
		if b.Zero() != nil || c.Synchronize() != nil {
			return 0
		}
		best = min(best, time.Since(t0))
	}
	return float64(n) / max(best.Seconds(), 1e-9)
}
