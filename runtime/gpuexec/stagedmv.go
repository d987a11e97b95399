package gpuexec

import (
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
)

// Staged mat-vecs (ops.DotShape.Stage, kernel.Stage): a one-row step's
// mat-vec whose group's rows fit copies them into shared memory before its
// wait for the kernel before, so a launch that fits in one wave has its
// whole matrix on the way while the light kernel before it (a norm, the
// attention, a quantizer) runs. JITLLM_STAGE=N stages the mat-vecs whose
// group's rows take at most N bytes a matrix (0: none; unset: 64 KiB);
// JITLLM_STAGE_ROWS=R only those of at most R output rows (unset: 6144,
// the launches of about a wave; 0: any). Measured on the H100 (stop 35):
// the 8B's step 1.4% faster staging its mat-vecs of at most 6144 rows,
// 3% slower staging every one (the SwiGLU's 3.4 waves give up occupancy
// to their slots); qwen3 4% faster. JITLLM_STAGE_ONCE=1 copies
// only each group's first iteration's rows, the ones that overlap the wait
// (ptx.Target.StageOnce), so a launch of several waves streams the rest
// as it would unstaged; JITLLM_STAGE_AHEAD=1 copies each iteration's
// next rows while it computes (ptx.Target.StageAhead: a resident grid, as
// a phased step's, walks its rows without a round trip at each).

// carveout is JITLLM_CARVEOUT, the percent of each multiprocessor's L1 and
// shared memory every kernel asks to be shared memory (cuda.Function.SetCarveout),
// or -1 (unset: the driver's choice by kernel). A staged mat-vec's CTAs
// take 7-18 KiB of it, beside kernels that take none.
func carveout() int {
	n := envInt("JITLLM_CARVEOUT", -1)
	if n < 0 || n > 100 {
		return -1
	}
	return n
}

// stageAhead is JITLLM_STAGE_AHEAD=1: a staged loop copies each next
// iteration's rows while it computes on the current one's
// (ptx.Target.StageAhead), in twice the shared memory.
func stageAhead() bool { return os.Getenv("JITLLM_STAGE_AHEAD") == "1" }

// stageGrid is JITLLM_STAGE_GRID=1: a staged kernel's grid is the CTAs
// resident at once (residentGrid), each walking several groups, rather
// than a CTA for every four.
func stageGrid() bool { return os.Getenv("JITLLM_STAGE_GRID") == "1" }

// stageGridPerSM is JITLLM_STAGE_GRID_SM=n: with JITLLM_STAGE_GRID, at most
// n CTAs a multiprocessor (0, unset: as many as are resident).
func stageGridPerSM() int { return max(envInt("JITLLM_STAGE_GRID_SM", 0), 0) }

// staged reports whether k stages a buffer (kernel.Stage).
func staged(k *kernel.Kernel) bool {
	return kernel.Any(k.Body, func(s *kernel.Stmt) bool { return s.Op == kernel.SStage })
}

// launchStageRoom is the most shared memory a plain launch's CTA stages
// in: 48 KiB keeps four of them on a multiprocessor.
const launchStageRoom = 48 << 10

// stageBytes is JITLLM_STAGE: the most bytes a group's rows of a matrix
// take to be staged (0: no staging).
func stageBytes() int { return max(envInt("JITLLM_STAGE", 64<<10), 0) }

// stageRows is JITLLM_STAGE_ROWS: the most output rows a staged mat-vec
// has (0 or less: no bound).
func stageRows() int {
	if n := envInt("JITLLM_STAGE_ROWS", 6144); n > 0 {
		return n
	}
	return math.MaxInt
}

// envInt is the integer environment variable name, or def where it is
// unset, empty or not an integer.
func envInt(name string, def int) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return def
	}
	return n
}

// stageShape is sh staging mat-vec d's rows where the knobs ask for it and
// they fit: a group's rows a matrix at most JITLLM_STAGE bytes, whole
// 16-byte copies, the CTA's groups (threadsPerBlock threads, or one wider
// group: ptx.StageSlots) within launchStageRoom (a phased step's: the renderer's
// ptx.StageLimit). A staged shape does not also prefetch.
func stageShape(sh ops.DotShape, d dotKey) ops.DotShape {
	limit := stageBytes()
	if limit == 0 || d.rows > stageRows() {
		return sh
	}
	rb, err := quant.RowBytes(d.t, int64(d.cols))
	if err != nil {
		return sh
	}
	per := sh.Rows * int(rb)
	mats := 1
	if d.form == "SwiGLU" {
		mats = 2
	}
	slots := ptx.StageSlots(max(sh.Threads, 32)) // as rendered: a group wider than a warp is its CTA
	if stageAhead() {
		slots *= 2 // a copy ahead beside each
	}
	room := launchStageRoom
	if _, on := phaseLimit(); on {
		room = ptx.StageLimit // a phased step's resident CTAs (the renderer checks its wider CTA)
	}
	if per > limit || per%16 != 0 || slots*mats*per > room {
		return sh
	}
	sh.Stage, sh.Prefetch = per, false
	return sh
}

// launchEarly is ptx.Target.LaunchEarly for plan p's one-row steps, by
// JITLLM_EARLY (an experiment, off by default): "light" every kernel but
// the mat-vecs (the norms, attention, quantizers), "staged" the kernels
// some launch of a staged mat-vec follows; nil otherwise. The mat-vec
// after then starts while the one before the light kernel finishes, its
// stages copying through that kernel's tail.
func launchEarly(p *plan) func(*kernel.Kernel) bool {
	mode := os.Getenv("JITLLM_EARLY")
	if mode != "light" && mode != "staged" {
		return nil
	}
	early := map[*kernel.Kernel]bool{}
	for _, ls := range p.oneRowSteps() {
		for i, l := range *ls {
			switch {
			case mode == "light" && !strings.HasPrefix(l.k.Name, "MatVec"):
				early[l.k] = true
			case mode == "staged" && i+1 < len(*ls) && staged((*ls)[i+1].k):
				early[l.k] = true
			}
		}
	}
	return func(k *kernel.Kernel) bool { return early[k] }
}
