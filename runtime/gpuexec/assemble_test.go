package gpuexec

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
)

// Every module the runner would load assembles with NVIDIA's ptxas where
// one is installed (a CUDA toolkit; the runner itself never needs it): the
// plan of each test model at 64 prefill rows rendered as bind renders it
// for sm_80 (tensor-core products, no dependent launches), sm_90 (the
// decode kernels rendered for dependent launches) and sm_90a (the prefill
// products on wgmma, JITLLM_WGMMA=1), and sm_90 traced (JITLLM_TRACE=1).
// The driver's own JIT
// checks the same at load on a GPU; this catches a PTX error on a machine
// without one.
func TestKernelsAssemble(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("no ptxas on PATH (a CUDA toolkit's; Debian: nvidia-cuda-toolkit): the rendered PTX is checked by the driver on a GPU")
	}
	ver, _ := exec.Command(ptxas, "--version").Output()
	dir := t.TempDir()
	for _, name := range models {
		m := loadModel(t, name)
		p, err := newPlanTiles(m, 128, 64, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range []ptx.Target{{SM: 80}, {SM: 90}, {SM: 90, WGMMA: true}, {SM: 90, Trace: true}} {
			src, ks, _, _, err := render(p, tg, tg.SM >= 90)
			if err != nil {
				t.Fatalf("%s %s: %v", name, arch(tg), err)
			}
			if tg.SM >= 90 && !strings.Contains(src, "griddepcontrol.wait") {
				t.Fatalf("%s %s: no kernel rendered for dependent launches", name, arch(tg))
			}
			assemble(t, ptxas, dir, strings.ReplaceAll(filepath.Base(name), ".", "_")+map[bool]string{true: "-trace"}[tg.Trace], src, tg)
			t.Logf("%s %s: %d kernels, %d bytes of PTX assembled", name, arch(tg), len(ks), len(src))
		}
	}
	// every prefill product shape, f16 and f32 activations, on each target
	var ks []*kernel.Kernel
	for _, sh := range prefillBlocks {
		for _, xk := range []kernel.Kind{kernel.U16, kernel.F32} {
			ks = append(ks, ops.MatMulBlock(sh, xk))
		}
	}
	// ReadBandwidth's stream, the Q6_KA layout's readers (the test models
	// have no Q6_K matrix of 2048 columns), the long decode step's
	// attention (their contexts stop short of the first tier of decodeSplits) and the
	// o projection of a Q4_K model whose one-row attention quantizes (the
	// test models have too few heads for it)
	ks = append(ks, ops.AttentionBlockSplit(64), ops.AttentionBlockSplit(128), ops.AttentionBlockHeads(64, false), ops.AttentionBlockHeads(128, true), ops.ReadStream(), ops.DequantF16(ops.Q6_KA), ops.Embed(ops.Q6_KA),
		ops.DotMatVec("", "Q6_KA", dotShape("", quant.Q6_K, 4096)), ops.DotMatVec("Add", "Q6_KA", ops.DotShape{Rows: 2, Unroll: 2}),
		ops.DotMatVec("Add", "Q4_KQ8_0", dotShape("Add", quant.Q4_K, 4096)), ops.DotMatVec("Add", "Q6_KAQ8_0", dotShape("Add", quant.Q6_K, 4096)), ops.AttentionBlockQ8_0(128, 1))
	// the SwiGLU that quantizes its own output (JITLLM_SWIGLU_Q8_0=1)
	sq, err := ops.DotSwiGLUQ8_0("Q4_K", dotShape("SwiGLU", quant.Q4_K, 14336))
	if err != nil {
		t.Fatal(err)
	}
	ks = append(ks, sq)
	// the counted folds (JITLLM_NORM_FOLD=count, JITLLM_SWIGLU_Q8_0=count)
	for _, c := range []struct{ form, typ string }{{"Add", "Q4_KQ8_0"}, {"SwiGLU", "Q4_K"}} {
		ck, err := ops.DotThenBlockCounted(c.form, c.typ, ops.DotShape{Rows: 2, Unroll: 2})
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, ck)
	}
	// a counted fold of a staged mat-vec (the 8B's o projection), rendered
	// for a dependent launch: its stages' copies before the wait
	staged, err := ops.DotThenBlockCounted("Add", "Q4_KQ8_0", ops.DotShape{Rows: 2, Unroll: 2, Stage: 4608})
	if err != nil {
		t.Fatal(err)
	}
	dep := ptx.Target{SM: 90, Dependent: func(*kernel.Kernel) bool { return true }}
	src, err := ptx.Module([]*kernel.Kernel{staged}, dep)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := ptx.Plan(staged, dep)
	if wait := strings.Index(src, "griddepcontrol.wait"); err != nil || lp.Stages == 0 || wait < 0 || !strings.Contains(src[:wait], "cp.async") {
		t.Fatalf("%s: launch %+v (%v), stages' copies before the wait: %v", staged.Name, lp, err, wait >= 0 && strings.Contains(src[:wait], "cp.async"))
	}
	if log := assemble(t, ptxas, dir, "staged-fold", src, dep); strings.Contains(log, "spill stores") && !strings.Contains(log, " 0 bytes spill stores") {
		t.Errorf("%s spills", staged.Name)
	}
	for _, tg := range []ptx.Target{{SM: 80}, {SM: 90}, {SM: 90, WGMMA: true}, {SM: 90, WGMMA: true, WGMMAOverlap: true}} {
		src, err := ptx.Module(ks, tg)
		if err != nil {
			t.Fatalf("products %+v: %v", tg, err)
		}
		assemble(t, ptxas, dir, fmt.Sprintf("products-%d-%v-%v", tg.SM, tg.WGMMA, tg.WGMMAOverlap), src, tg)
		t.Logf("%d prefill products, AttentionBlockSplit, ReadStream and Q6_KA's kernels for %s assembled", len(prefillBlocks)*2, arch(tg))
	}
	t.Logf("%s", bytes.TrimSpace(ver))
}

func arch(tg ptx.Target) string {
	a := fmt.Sprintf("sm_%d", tg.SM)
	if tg.WGMMA {
		a += "a"
	}
	return a
}

// assemble runs ptxas on src for tg, failing t with its log; ptxas's
// verbose log is returned (registers, spills).
func assemble(t *testing.T, ptxas, dir, name, src string, tg ptx.Target) string {
	t.Helper()
	in := filepath.Join(dir, name+".ptx")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(ptxas, "-v", "-arch="+arch(tg), "-o", in+".cubin", in)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: ptxas: %v\n%s", name, arch(tg), err, out.String())
	}
	if strings.Contains(out.String(), "bytes spill stores") && !strings.Contains(out.String(), " 0 bytes spill stores") {
		t.Logf("%s %s: spills: %s", name, arch(tg), out.String())
	}
	return out.String()
}

// TestMatVecCTAsBudget checks JITLLM_MATVEC_CTAS: the split q·k·v mat-vec
// (Q4_K beside Q6_KA at unroll 1, 70 registers as ptxas picks them; 88 at
// the Q6_KA rows' unroll 2, where a budget of 80 spills) rendered to fit
// 7 CTAs of 128 a multiprocessor takes at most 72 registers, the budget
// .minnctapersm 7 leaves, and spills nothing.
func TestMatVecCTAsBudget(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("no ptxas on PATH (a CUDA toolkit's; Debian: nvidia-cuda-toolkit): the rendered PTX is checked by the driver on a GPU")
	}
	if matVecCTAs("") != nil || matVecCTAs("1") != nil || matVecCTAs("x") != nil {
		t.Fatal("matVecCTAs set a budget from an empty, 1 or unparsable value")
	}
	k := ops.DotMatVecRopeKVSplit("Q4_K", "Q6_KA", ops.DotShape{Rows: 2, Unroll: 2}, 1)
	other := ops.DotMatVec("Add", "Q4_K", ops.DotShape{Rows: 2, Unroll: 2})
	tg := ptx.Target{SM: 90, MinCTAs: matVecCTAs("7:_Q6_KA")}
	if tg.MinCTAs(k) != 7 || tg.MinCTAs(other) != 0 {
		t.Fatalf("JITLLM_MATVEC_CTAS=7:_Q6_KA picks %d for %s and %d for %s", tg.MinCTAs(k), k.Name, tg.MinCTAs(other), other.Name)
	}
	src, err := ptx.Module([]*kernel.Kernel{k, other}, tg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(src, ".minnctapersm 7") != 1 {
		t.Fatalf("want one kernel bounded to 7 CTAs:\n%s", src[:min(len(src), 2000)])
	}
	log := assemble(t, ptxas, t.TempDir(), "matvec-ctas", src, tg)
	re := regexp.MustCompile(`Function properties for (\S+)[\s\S]*?(\d+) bytes spill stores[\s\S]*?Used (\d+) registers`)
	seen := 0
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		if !strings.Contains(m[1], "Q6_KA") {
			continue
		}
		seen++
		regs, _ := strconv.Atoi(m[3])
		if regs > 72 || m[2] != "0" {
			t.Fatalf("%s: %s registers, %s bytes spilled, want at most 72 and none", m[1], m[3], m[2])
		}
		t.Logf("%s: %s registers", m[1], m[3])
	}
	if seen != 1 {
		t.Fatalf("ptxas's log names the bounded kernel %d times:\n%s", seen, log)
	}
}

// The knobs still to time (docs/gpu.md) load as the defaults do: the
// synth 1B's plan with the counted folds, the split launch's v rows at
// unroll 1 and the short attention over two warps renders for sm_90 with
// dependent launches and assembles (stop 39's device call found the
// counted folds' module refused for two kernels of one name).
func TestKnobModulesAssemble(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("no ptxas on PATH (a CUDA toolkit's; Debian: nvidia-cuda-toolkit): the rendered PTX is checked by the driver on a GPU")
	}
	m := loadModel(t, "synth:llama-3.2-1b/Q4_K_M")
	for _, knobs := range [][]string{
		{"JITLLM_NORM_FOLD", "count", "JITLLM_SWIGLU_Q8_0", "count"},
		{"JITLLM_ROPE_SPLIT_UNROLL", "1", "JITLLM_ATTN_WARPS", "2", "JITLLM_MATVEC_CTAS", "7:_Q6_KA"},
	} {
		for i := 0; i < len(knobs); i += 2 {
			t.Setenv(knobs[i], knobs[i+1])
		}
		p, err := newPlanTiles(m, 128, 64, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		tg := ptx.Target{SM: 90} // render takes JITLLM_MATVEC_CTAS itself
		src, ks, _, _, err := render(p, tg, true)
		if err != nil {
			t.Fatalf("%v: %v", knobs, err)
		}
		assemble(t, ptxas, t.TempDir(), "knobs", src, tg)
		t.Logf("%v: %d kernels assembled", knobs, len(ks))
		for i := 0; i < len(knobs); i += 2 {
			t.Setenv(knobs[i], "")
		}
	}
}

// TestStepOccupancy assembles the one-row step of profileModel
// (GPUEXEC_PROFILE_MODEL, else tiny256) for sm_90 as bind renders it under
// the knobs set, and logs each launch's grid, CTA, registers (ptxas -v),
// shared memory, the CTAs a multiprocessor holds (sm_90: 64K registers
// allocated 256 a warp, 64 warps, 32 CTAs, 228 KiB of shared memory, 1 KiB
// of it reserved a CTA) and the waves the grid takes on 132
// multiprocessors: where a launch runs a little over a whole number of
// waves, a register budget (JITLLM_MATVEC_CTAS) or another shape pays. It
// fails where a launch's kernel is missing from ptxas's log.
func TestStepOccupancy(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("no ptxas on PATH (a CUDA toolkit's; Debian: nvidia-cuda-toolkit)")
	}
	p, err := newPlanTiles(profileModel(t), 4096, 512, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	src, _, tg, _, err := render(p, ptx.Target{SM: 90}, true)
	if err != nil {
		t.Fatal(err)
	}
	log := assemble(t, ptxas, t.TempDir(), "step", src, tg)
	regs := map[string]int{}
	re := regexp.MustCompile(`Function properties for (\S+)[\s\S]*?Used (\d+) registers`)
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		regs[m[1]], _ = strconv.Atoi(m[2])
	}
	const sms = 132
	var b strings.Builder
	seen := map[*kernel.Kernel]bool{}
	for _, l := range p.launches {
		if seen[l.k] {
			continue
		}
		seen[l.k] = true
		sizes := make([]any, len(l.args))
		for i, a := range l.args {
			if v, ok := a.(view); ok {
				sizes[i] = ptx.Elems(v.n)
			} else {
				sizes[i] = a
			}
		}
		grid, block, shared, err := launchShape(l.k, tg, sizes...)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := regs[l.k.Name]
		if !ok {
			t.Fatalf("%s: not in ptxas's log", l.k.Name)
		}
		warps := (int(block.X) + 31) / 32
		ctas := min(32, 64/warps, 65536/((r*32+255)/256*256*warps))
		if shared > 0 {
			ctas = min(ctas, (228<<10)/(int(shared)+1024))
		}
		fmt.Fprintf(&b, "%-44s %6d CTAs of %4d, %3d registers, %6d B shared: %2d a multiprocessor, %5.2f waves\n",
			l.k.Name, grid.X, block.X, r, shared, ctas, float64(grid.X)/float64(max(ctas, 1)*sms))
	}
	t.Logf("the one-row step's launches on sm_90 (%d multiprocessors):\n%s", sms, b.String())
}
