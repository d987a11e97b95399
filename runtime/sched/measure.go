package sched

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/jitllm/jitllm/runtime/exec"
)

// cpuMeasureRows caps the rows of the piece timed on a CPU: its speed a
// row is flat from a few dozen rows, and a block of a large model takes
// seconds a piece there.
const cpuMeasureRows = 128

// Speeds are a device's measured rates on one model's block: weight bytes
// of the block over the time of a decode step (one row) and over the time
// of a prompt piece's rows (bytes × rows a second).
type Speeds struct {
	Decode, Prefill float64
}

// MeasureBlock times one block of m on d as a stage of its own, planned as
// New plans a stage (cpus CPU stages sharing the host's cores): the best
// of three decode steps and of two pieces of rows rows (capped on a CPU)
// after a warm-up of each. A middle block is timed where there is one, so
// neither the embedding nor the output head is in the figures.
func MeasureBlock(m *exec.Model, d Device, opt exec.Options, rows, cpus int) (Speeds, error) {
	L := m.Graph.Layers
	if L < 2 {
		return Speeds{}, fmt.Errorf("a model of %d block(s) has no block to time alone", L)
	}
	b := min(1, L-2) // block 1 when a block follows it, else block 0 (the embedding lookup is one row a token)
	c, err := CostsOf(m, 1)
	if err != nil {
		return Speeds{}, err
	}
	work := c.Work[b]
	if work <= 0 {
		return Speeds{}, fmt.Errorf("block %d reads no weights", b)
	}
	sm, err := m.Stage(b, b+1)
	if err != nil {
		return Speeds{}, err
	}
	if d.Kind == "cpu" {
		rows = min(rows, cpuMeasureRows)
	}
	opt.Context = rows + 8
	st, err := newStage(sm, Stage{Device: d, Lo: b, Hi: b + 1}, opt, rows, cpus)
	if err != nil {
		return Speeds{}, err
	}
	defer st.r.Close()
	rows = min(rows, st.rows)
	inW, _ := sm.StageWidth()
	toks := make([]int32, rows)
	in := make([]float32, rows*inW)
	for i := range in {
		in[i] = float32(math.Sin(float64(i))) // any finite rows: the time does not depend on them
	}
	timeSteps := func(n, runs int) (time.Duration, error) {
		best := time.Duration(math.MaxInt64)
		for i := 0; i <= runs; i++ { // the first is a warm-up
			st.r.Truncate(0)
			t0 := time.Now()
			if _, err := st.r.StageStep(toks[:n], in[:n*inW], n); err != nil {
				return 0, fmt.Errorf("timing block %d on %s: %w", b, d.ID, err)
			}
			if i > 0 {
				best = min(best, time.Since(t0))
			}
		}
		return max(best, time.Nanosecond), nil
	}
	dec, err := timeSteps(1, 3)
	if err != nil {
		return Speeds{}, err
	}
	pre, err := timeSteps(rows, 2)
	if err != nil {
		return Speeds{}, err
	}
	return Speeds{Decode: work / dec.Seconds(), Prefill: work * float64(rows) / pre.Seconds()}, nil
}

// MeasureSpeeds sets each device's Speed to its measured prompt rate on
// m's blocks (MeasureBlock), each distinct device measured once: a list
// places blocks to balance a pipelined prompt, and a CPU is compute-bound
// there, so its memory bandwidth would overrate it against a GPU by an
// order of magnitude. When a measurement fails no Speed changes (the
// figures of two kinds would not compare).
func MeasureSpeeds(m *exec.Model, devs []Device, opt Options) error {
	piece := opt.Piece
	if piece <= 0 {
		piece = DefaultPiece
	}
	cpus := 0
	for _, d := range devs {
		if d.Kind == "cpu" {
			cpus++
		}
	}
	measured := map[string]Speeds{}
	for _, d := range devs {
		if _, ok := measured[d.ID]; ok {
			continue
		}
		s, err := MeasureBlock(m, d, opt.Options, piece, cpus)
		if err != nil {
			return err
		}
		measured[d.ID] = s
	}
	for i := range devs {
		devs[i].Speed = measured[devs[i].ID].Prefill
	}
	return nil
}

// Warnf reports what the scheduler worked around (a speed it could not
// measure); tests replace it.
var Warnf = func(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "jitllm: "+format+"\n", args...)
}
