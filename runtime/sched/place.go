// Package sched places a model's blocks on the devices of one host and runs
// them as a pipeline of stages: each stage is the model's graph cut at
// block boundaries (dsl.G.Stage), planned by the device's own backend
// (runtime/exec on a CPU, runtime/gpuexec on a CUDA GPU) with the KV cache
// of its blocks; hidden-state rows are copied from stage to stage on the
// devices between two GPUs, else through host memory. A prompt flows
// through the stages in pieces, so the devices work at once; a decode
// step goes through every stage in turn. One
// mechanism serves every split: CPU+CPU, CPU+GPU, GPU+GPU, and two stages
// on one GPU. See docs/sched.md.
package sched

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/jitllm/jitllm/runtime/discover"
)

// Device is one place a stage can run.
type Device struct {
	ID      string // "cpu", "cuda:0", …
	Kind    string // "cpu" or "cuda"
	Ordinal int    // CUDA device ordinal
	// Free is the memory the device offers this model, in bytes.
	Free int64
	// Speed is the device's rate of weight bytes a second: a stage's time
	// is its weight bytes over Speed. Devices gives the memory bandwidth
	// (decode reads every weight once a token); MeasureSpeeds, for a list,
	// the rate of a prompt piece through one of the model's blocks (bytes
	// × rows a second), which a pipelined prompt's balance depends on.
	Speed float64
	// Fixed is what any stage takes on the device beyond its blocks,
	// embedding and head: activations, scratch, the backend's overhead.
	Fixed int64
}

// Costs are a model's parts as placement sees them.
type Costs struct {
	Blocks []int64   // memory of each block: its weights and KV cache
	Work   []float64 // weight bytes each block reads a token
	// Head is the first stage's extra memory (the token embedding), Tail
	// the last stage's (the final norm and output head); TailWork is the
	// head's bytes read a token (the embedding reads one row: none).
	Head, Tail int64
	TailWork   float64
}

// Stage is one device's share of the blocks: [Lo, Hi).
type Stage struct {
	Device Device
	Lo, Hi int
	Bytes  int64   // memory the stage needs on the device, as Costs count it
	Time   float64 // Work over Speed: seconds a token (bandwidth speeds) or a piece's row (measured)
}

// Placement is the stages in pipeline order, covering every block once.
type Placement []Stage

func (p Placement) String() string {
	var b strings.Builder
	for i, s := range p {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: blocks %d-%d (%s)", s.Device.ID, s.Lo, s.Hi-1, discover.GiB(s.Bytes))
	}
	return b.String()
}

// Short is the placement in a few characters: "cuda:0[0-15]+cpu[16-31]".
func (p Placement) Short() string {
	var b strings.Builder
	for i, s := range p {
		if i > 0 {
			b.WriteByte('+')
		}
		fmt.Fprintf(&b, "%s[%d-%d]", s.Device.ID, s.Lo, s.Hi-1)
	}
	return b.String()
}

func (c Costs) layers() int { return len(c.Blocks) }

// bytes is what blocks [lo, hi) take on d.
func (c Costs) bytes(d Device, lo, hi int) int64 {
	n := d.Fixed
	for _, b := range c.Blocks[lo:hi] {
		n += b
	}
	if lo == 0 {
		n += c.Head
	}
	if hi == c.layers() {
		n += c.Tail
	}
	return n
}

func (c Costs) time(d Device, lo, hi int) float64 {
	w := 0.0
	for _, x := range c.Work[lo:hi] {
		w += x
	}
	if hi == c.layers() {
		w += c.TailWork
	}
	return w / d.Speed
}

// Place assigns contiguous runs of blocks to devs in their order, so that
// each run fits its device's free memory and the slowest stage is as fast
// as it can be: the blocks go out in proportion to the devices' speeds,
// which keeps every device of a pipelined prompt busy. Every device gets at
// least one block. A device listed twice (two stages on one CPU or GPU)
// shares its free memory evenly between its stages.
func Place(c Costs, devs []Device) (Placement, error) {
	return place(c, devs, true)
}

// PlaceFewest places the blocks on the fewest of devs that hold them, the
// fastest first: a decode step runs through every stage in turn, so a
// device that is not needed for memory only adds its time. Within the
// devices chosen the blocks go out as Place gives them.
func PlaceFewest(c Costs, devs []Device) (Placement, error) {
	byspeed := append([]Device(nil), devs...)
	sort.SliceStable(byspeed, func(i, j int) bool { return byspeed[i].Speed > byspeed[j].Speed })
	var err error
	for k := 1; k <= len(byspeed); k++ {
		var p Placement
		if p, err = place(c, byspeed[:k], false); err == nil {
			return p, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("no devices to place the model on")
	}
	return nil, err
}

func place(c Costs, devs []Device, everyDevice bool) (Placement, error) {
	L, k := c.layers(), len(devs)
	switch {
	case L == 0:
		return nil, fmt.Errorf("the model has no blocks to place")
	case k == 0:
		return nil, fmt.Errorf("no devices to place the model on")
	case len(c.Work) != L:
		return nil, fmt.Errorf("costs: %d blocks but %d work figures", L, len(c.Work))
	case everyDevice && k > L:
		return nil, fmt.Errorf("%d devices for %d blocks: each device needs a block at least", k, L)
	}
	share := map[string]int{}
	for _, d := range devs {
		if d.Speed <= 0 || math.IsNaN(d.Speed) {
			return nil, fmt.Errorf("device %s has speed %v", d.ID, d.Speed)
		}
		share[d.ID]++
	}
	free := make([]int64, k)
	for i, d := range devs {
		free[i] = d.Free / int64(share[d.ID])
	}
	// best[i][j]: the least bottleneck with devices [0, i) running blocks
	// [0, j); from[i][j] the first block of device i-1's run.
	inf := math.Inf(1)
	best := make([][]float64, k+1)
	from := make([][]int, k+1)
	for i := range best {
		best[i] = make([]float64, L+1)
		from[i] = make([]int, L+1)
		for j := range best[i] {
			best[i][j] = inf
		}
	}
	best[0][0] = 0
	for i := 1; i <= k; i++ {
		d := devs[i-1]
		for j := 0; j <= L; j++ {
			for lo := j; lo >= 0; lo-- {
				if best[i-1][lo] == inf {
					continue
				}
				t := 0.0
				if lo < j {
					if c.bytes(d, lo, j) > free[i-1] {
						continue
					}
					t = c.time(d, lo, j)
				} else if everyDevice {
					continue
				}
				if b := max(best[i-1][lo], t); b < best[i][j] {
					best[i][j], from[i][j] = b, lo
				}
			}
		}
	}
	if best[k][L] == inf {
		return nil, c.noFit(devs, free)
	}
	var p Placement
	for i, j := k, L; i > 0; i-- {
		lo := from[i][j]
		if lo < j {
			d := devs[i-1]
			p = append(p, Stage{Device: d, Lo: lo, Hi: j, Bytes: c.bytes(d, lo, j), Time: c.time(d, lo, j)})
		}
		j = lo
	}
	for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
		p[i], p[j] = p[j], p[i]
	}
	return p, nil
}

// noFit says why no placement exists, with the sizes that decide it.
func (c Costs) noFit(devs []Device, free []int64) error {
	var total, largest int64
	for _, b := range c.Blocks {
		total += b
		largest = max(largest, b)
	}
	var offer []string
	for i, d := range devs {
		offer = append(offer, fmt.Sprintf("%s %s free (%s of it for one stage's activations and overhead)", d.ID, discover.GiB(free[i]), discover.GiB(d.Fixed)))
	}
	return fmt.Errorf("the model does not fit these devices: its %d blocks take %s (the largest %s), the embedding %s and the output head %s; the devices offer %s",
		len(c.Blocks), discover.GiB(total), discover.GiB(largest), discover.GiB(c.Head), discover.GiB(c.Tail), strings.Join(offer, ", "))
}
