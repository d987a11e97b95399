package gpuexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/synth"
	"github.com/jitllm/jitllm/runtime/weights"
)

const testdata = "../../testdata"

// models are the files the GPU runner is checked on, one per weight type
// the llama graph meets in testdata.
var models = []string{
	"stories260K.gguf",
	"derived/stories260K-Q8_0.gguf",
	"derived/stories260K-Q4_0.gguf",
	"synthetic/tiny256-Q4_K_M.gguf",
	"synthetic/tiny256-Q6_K.gguf",
	"llama-2-tiny-random.gguf",
	"synth:qwen3-0.6b/Q8_0", // per-head q/k norms, NEOX rotation, head width ≠ embd/heads
	bf16Name,
}

// bf16Name is a model of BF16 matrices (a Hugging Face checkpoint's own
// type): "bf16:FILE" is FILE's float matrices rounded to BF16 (bf16Model).
const bf16Name = "bf16:synthetic/tiny256-F16.gguf"

// synthShapes are the architectures testdata holds no file of: loadModel
// writes a 2-block model of the preset's kind at these sizes (synth is
// deterministic, so every run sees the same weights).
var synthShapes = map[string]func(*synth.Shape){
	"qwen3-0.6b": func(s *synth.Shape) { s.Vocab, s.Embd, s.Heads, s.KVHeads, s.HeadDim, s.FF = 512, 128, 4, 2, 64, 256 },
	// 2048 columns: whole Q6_KA groups (the tied output head, attn_v)
	"llama-3.2-1b": func(s *synth.Shape) { s.Vocab, s.Embd, s.Heads, s.KVHeads, s.HeadDim, s.FF = 512, 2048, 4, 2, 64, 256 },
}

// synthModel writes the model "preset/TYPE" names (see synthShapes).
func synthModel(t testing.TB, spec string) string {
	like, typ, _ := strings.Cut(spec, "/")
	s, err := synth.Like(like)
	if err != nil {
		t.Fatal(err)
	}
	resize, ok := synthShapes[like]
	if !ok {
		t.Fatalf("no test size for %s", like)
	}
	resize(&s)
	ft, err := synth.ParseFileType(typ)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), like+"-"+typ+".gguf")
	if _, err := synth.Write(context.Background(), path, synth.Options{Shape: s, Type: ft, Seed: 5, Layers: 2}); err != nil {
		t.Fatal(err)
	}
	return path
}

// prompt is the fixed prompt of the generation tests (ids valid in every model).
var prompt = []int32{1, 403, 407, 261, 378, 432, 383}

func loadModel(t testing.TB, name string) *exec.Model {
	t.Helper()
	path := filepath.Join(testdata, name)
	if spec, ok := strings.CutPrefix(name, "synth:"); ok {
		path = synthModel(t, spec)
	}
	if file, ok := strings.CutPrefix(name, "bf16:"); ok {
		path = bf16Model(t, filepath.Join(testdata, file))
	}
	src, err := weights.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// hostExec runs a plan with the dsl/kernel interpreter over Go slices: the
// same launches, arguments and buffer views the GPU gets, so the plan (and
// every kernel's semantics) is checked here without a GPU.
type hostExec struct {
	p    *plan
	mem  []any
	pos  int
	last []float32
}

func newHostExec(p *plan) *hostExec {
	h := &hostExec{p: p}
	for _, a := range p.allocs {
		var m any
		switch a.kind {
		case kernel.F32:
			v := make([]float32, a.n)
			for i := range v {
				if a.init != nil {
					v[i] = math.Float32frombits(uint32(a.init[4*i]) | uint32(a.init[4*i+1])<<8 | uint32(a.init[4*i+2])<<16 | uint32(a.init[4*i+3])<<24)
				}
			}
			m = v
		case kernel.U16:
			m = make([]uint16, a.n)
		case kernel.I32:
			m = make([]int32, a.n)
		case kernel.U32:
			m = make([]uint32, a.n)
		case kernel.U8:
			b := make([]byte, a.n)
			a.initBytes(func(off int, src []byte) error { copy(b[off:], src); return nil })
			m = b
		default:
			panic("allocation kind " + a.kind.String())
		}
		h.mem = append(h.mem, m)
	}
	if err := h.run(p.setup); err != nil { // the resident f16 weights, as bind decodes them
		panic(err)
	}
	return h
}

func (h *hostExec) slice(v view) any {
	switch m := h.mem[v.a].(type) {
	case []float32:
		return m[v.off : v.off+v.n]
	case []uint16:
		return m[v.off : v.off+v.n]
	case []int32:
		return m[v.off : v.off+v.n]
	case []uint32:
		return m[v.off : v.off+v.n]
	case []byte:
		return m[v.off : v.off+v.n]
	}
	panic("unreachable")
}

// Forward steps as the Runner does without LogitsAll: a few tokens (up to
// vrows) in a verify step, a longer prompt in prefill chunks (the last
// padded with token 0), single tokens one-row steps.
func (h *hostExec) Forward(tokens []int32) ([]float32, error) {
	st := h.mem[h.p.step].([]int32)
	if n := len(tokens); n > 1 && n <= h.p.vrows() {
		rows, err := h.ForwardRows(tokens)
		if err != nil {
			return nil, err
		}
		h.last = append(h.last[:0], rows[(n-1)*h.p.vocab:]...)
		return h.last, nil
	}
	if h.p.rows > 1 && len(tokens) > 1 {
		for len(tokens) > 0 {
			n := min(len(tokens), h.p.rows)
			clear(st)
			st[0], st[1] = int32(n-1), int32(h.pos)
			copy(st[2:], tokens[:n])
			if err := h.run(h.p.prefill); err != nil {
				return nil, err
			}
			h.pos += n
			tokens = tokens[n:]
		}
		h.last = append(h.last[:0], h.slice(h.p.plogits).([]float32)...)
		return h.last, nil
	}
	for _, tok := range tokens {
		st[0], st[1], st[2] = 0, int32(h.pos), tok
		if err := h.run(h.p.decodeAt(h.pos)); err != nil {
			return nil, err
		}
		h.pos++
	}
	h.last = append(h.last[:0], h.slice(h.p.logits).([]float32)...)
	return h.last, nil
}

// ForwardRows runs tokens as the Runner's ForwardRows does: the smallest
// verify step that holds up to vrows of them (its rows past them padded
// with token 0), a single token a one-row step; every row's logits.
func (h *hostExec) ForwardRows(tokens []int32) ([]float32, error) {
	st := h.mem[h.p.step].([]int32)
	h.last = h.last[:0]
	for len(tokens) > 0 {
		n := min(len(tokens), h.p.vrows())
		clear(st)
		st[0], st[1] = int32(n-1), int32(h.pos)
		copy(st[2:], tokens[:n])
		ls, lv := h.p.decodeAt(h.pos), h.p.logits
		if n > 1 {
			v := h.p.verify[h.p.verifyFor(n)]
			ls, lv = v.launches, v.logits
		}
		if err := h.run(ls); err != nil {
			return nil, err
		}
		h.last = append(h.last, h.slice(lv).([]float32)[:n*h.p.vocab]...)
		h.pos += n
		tokens = tokens[n:]
	}
	return h.last, nil
}

// hostCTAs is the CTAs hostExec runs a local phased launch in: more than
// one, so one CTA's later phase runs before another's first.
const hostCTAs = 3

func (h *hostExec) run(ls []launch) error {
	for _, l := range ls {
		args := make([]any, len(l.args))
		for i, a := range l.args {
			if v, ok := a.(view); ok {
				args[i] = h.slice(v)
			} else {
				args[i] = a
			}
		}
		run := kernel.Run
		if l.k.Local != nil {
			// CTA-local phases CTA after CTA, as a GPU may run them: a
			// phase that reads what another CTA writes (the same
			// scratch read in one phase and written in another) breaks
			// the results here too
			run = func(k *kernel.Kernel, args ...any) error { return kernel.RunCTAs(k, hostCTAs, args...) }
		}
		if l.k.Epilogue != nil {
			// a block epilogue's groups out of order, as a GPU may run them
			run = func(k *kernel.Kernel, args ...any) error { return kernel.RunGroups(k, uint64(h.pos)+1, args...) }
		}
		if err := run(l.k, args...); err != nil {
			return fmt.Errorf("node %d (%s): %w", l.node, l.k.Name, err)
		}
	}
	return nil
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// forwarder is what the agreement checks step: the CPU runner, the GPU
// runner or the interpreter over the GPU plan.
type forwarder interface {
	Forward([]int32) ([]float32, error)
}

// tolerance is the largest logit difference allowed between the CPU runner
// and the GPU plan for a model. Both round activations to the same
// quantized values and keep f16 KV values; the mat-vecs differ in the
// order of f32 (and f64) rounding, ~1e-6 relative, attention
// (AttentionSplit) keeps its accumulator in f32 where the CPU rounds it to
// f16 at every position, ~1e-3 relative, and prefill products of quantized
// matrices (MatMulBlock) round the decoded weights to f16, ~2e-4 relative.
// Either still flips an f16 KV value now and then (runtime/exec's own
// batch and token-by-token runs differ by ~2e-3 for it), so the float
// models get 2e-2 (measured up to 1.31e-2 over 32 tokens with
// AttentionSplit, 3.3e-3 before it). On the quantized ones an activation
// within an ulp of a rounding boundary of its Q8 quantization can land on
// the other side, which moves one quant by one step, and the random
// synthetic models amplify that: their logits (max |logit| 12.5) move by
// up to 0.55 over 32 tokens with the mat-vecs' sum order alone, up to 1.52
// with the f16 prefill products. The BF16 model rounds every mat-vec's
// activation to bf16 (8 bits): an attention difference now and then
// moves such a value to the next bf16, a step of 2^-8 of it (measured interpreted: 0.122 over 32 tokens, tensor-core products or
// not, 0.165 over verify rows; the F16 model it is rounded from, 0.0166),
// so it gets 0.5.
func tolerance(name string) float64 {
	switch name {
	case "stories260K.gguf", "llama-2-tiny-random.gguf":
		return 2e-2
	case bf16Name:
		return 0.5
	}
	return 2
}

// nearTie is the CPU's largest margin between its pick and a different
// pick of the other that the allowed logit differences explain: a tie they
// may break either way (measured: 0.05 and 0.215 on the synthetic models).
func nearTie(logitTol float64) float64 { return logitTol / 4 }

// agree runs greedy generation of n tokens on both, feeding both the CPU's
// pick, and fails on a step whose logits differ by more than logitTol or
// whose picks differ where the CPU's logits do not make them a near tie.
func agree(t *testing.T, cpu, other forwarder, n int, logitTol float64) {
	t.Helper()
	agreeFrom(t, cpu, other, prompt, n, logitTol)
}

// agreeFrom is agree from prompt toks.
func agreeFrom(t *testing.T, cpu, other forwarder, toks []int32, n int, logitTol float64) {
	t.Helper()
	a, err := cpu.Forward(toks)
	if err != nil {
		t.Fatal(err)
	}
	b, err := other.Forward(toks)
	if err != nil {
		t.Fatal(err)
	}
	worst, ties := 0.0, 0
	for i := 0; ; i++ {
		d := maxDiff(a, b)
		worst = max(worst, d)
		if d > logitTol {
			t.Fatalf("step %d: logits differ by %.3g (> %g)", i, d, logitTol)
		}
		ta, tb := argmax(a), argmax(b)
		if ta != tb {
			margin := float64(a[ta] - a[tb])
			if margin >= nearTie(logitTol) {
				t.Fatalf("step %d: CPU picks token %d, the other %d (the CPU's margin %.3g)", i, ta, tb, margin)
			}
			t.Logf("step %d: a near tie (CPU margin %.3g) picked %d by the CPU, %d by the other; both go on with %d", i, margin, ta, tb, ta)
			ties++
		}
		if i == n {
			break
		}
		if a, err = cpu.Forward([]int32{ta}); err != nil {
			t.Fatal(err)
		}
		if b, err = other.Forward([]int32{ta}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d tokens, %d near ties; largest logit difference %.3g", n, ties, worst)
}

// The GPU plan, interpreted here, generates what the CPU runner generates:
// this checks every launch's arguments and every kernel's arithmetic
// without a GPU (a few tokens: the interpreter is slow).
func TestPlanMatchesCPU(t *testing.T) {
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			cpu := cpuRunner(t, m, exec.Options{Context: 64})
			// prefill steps of 4 rows: the 7-token prompt is a full chunk
			// and a padded one
			p, err := newPlan(m, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			n := 4
			if testing.Short() {
				n = 1
			}
			if os.Getenv("GPUEXEC_PLAN_TOKENS") != "" {
				n, _ = strconv.Atoi(os.Getenv("GPUEXEC_PLAN_TOKENS"))
			}
			agree(t, cpu, newHostExec(p), n, tolerance(name))
		})
	}
}

// With room for resident f16 weights the prefill products read copies
// decoded once (the plan's setup launches), and the interpreted plan still
// generates what the CPU runner generates.
func TestResidentF16PlanMatchesCPU(t *testing.T) {
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	cpu := cpuRunner(t, m, exec.Options{Context: 64})
	shared, err := newPlanTiles(m, 64, 4, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlanTiles(m, 64, 4, true, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	count := func(ls []launch, name string) (n int) {
		for _, l := range ls {
			if strings.HasPrefix(l.k.Name, name) {
				n++
			}
		}
		return n
	}
	tiled := count(shared.prefill, "MatMulBlock")
	if tiled == 0 || count(shared.prefill, "DequantF16") != tiled || len(shared.setup) != 0 {
		t.Fatalf("no budget: %d tiled products, %d decodes a step, %d setup launches", tiled, count(shared.prefill, "DequantF16"), len(shared.setup))
	}
	if got := count(p.prefill, "DequantF16"); got != 0 {
		t.Errorf("resident: %d decodes left in the prefill step", got)
	}
	if got := count(p.setup, "DequantF16"); got == 0 || got > tiled {
		t.Errorf("resident: %d setup decodes for %d tiled products", got, tiled)
	}
	agree(t, cpu, newHostExec(p), 2, tolerance("synthetic/tiny256-Q4_K_M.gguf"))
	// a budget too small for any matrix keeps the shared scratch
	small, err := newPlanTiles(m, 64, 4, true, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(small.setup) != 0 || count(small.prefill, "DequantF16") != tiled {
		t.Errorf("16-byte budget: %d setup launches, %d decodes a step", len(small.setup), count(small.prefill, "DequantF16"))
	}
}

// In one-row steps each block's two residual Adds, its SiLU and the SwiGLU's
// Mul are done by the mat-vecs before them (MatVecWarpAdd*, MatVecWarpSiLU*
// or their integer forms MatVecDotAdd*, MatVecDotSiLU*, MatVecDotMul*), and
// the norms quantize for the mat-vecs that read them (RMSNormQuantize*): no
// AddF32, SiLUF32, MulF32 or RMSNorm launch is left for a quantized llama;
// prefill steps keep theirs.
func TestMatVecEpiloguesFused(t *testing.T) {
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	p, err := newPlan(m, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	count := func(ls []launch, prefix string) int {
		n := 0
		for _, l := range ls {
			if strings.HasPrefix(l.k.Name, prefix) {
				n++
			}
		}
		return n
	}
	layers := m.Graph.Hyper.Int("block_count")
	if layers < 1 {
		t.Fatalf("block_count %d", layers)
	}
	if got := count(p.launches, "MatVecWarpAdd") + count(p.launches, "MatVecDotAdd"); got != 2*layers {
		t.Errorf("decode step: %d fused mat-vec adds, want %d (two a block)", got, 2*layers)
	}
	if got := count(p.launches, "AddF32"); got != 0 {
		t.Errorf("decode step: %d AddF32 launches left", got)
	}
	if got := count(p.prefill, "AddF32"); got != 2*layers {
		t.Errorf("prefill step: %d AddF32 launches, want %d", got, 2*layers)
	}
	// the gate and up projections are one integer mat-vec: the gate's SiLU
	// and the Mul done as it stores
	if got := count(p.launches, "MatVecDotSwiGLU"); got != layers {
		t.Errorf("decode step: %d fused gate and up mat-vecs, want %d (one a block)", got, layers)
	}
	if got := count(p.launches, "MatVecWarpSiLU") + count(p.launches, "MatVecDotSiLU") + count(p.launches, "MatVecDotMul"); got != 0 {
		t.Errorf("decode step: %d gate or up mat-vecs left", got)
	}
	if got := count(p.launches, "SiLUF32"); got != 0 {
		t.Errorf("decode step: %d SiLUF32 launches left", got)
	}
	if got := count(p.launches, "MulF32"); got != 0 {
		t.Errorf("decode step: %d MulF32 launches left", got)
	}
	if got := count(p.prefill, "MulF32"); got != layers {
		t.Errorf("prefill step: %d MulF32 launches, want %d", got, layers)
	}
	// each block's two norms and the final one quantize for their mat-vecs
	if got := count(p.launches, "RMSNormQuantize"); got != 2*layers+1 {
		t.Errorf("decode step: %d fused norm quantizers, want %d", got, 2*layers+1)
	}
	if got := count(p.launches, "RMSNorm") - count(p.launches, "RMSNormQuantize"); got != 0 {
		t.Errorf("decode step: %d RMSNorm launches left", got)
	}
	if got, want := count(p.launches, "Quantize"), layers; got != want { // after the SwiGLU
		t.Errorf("decode step: %d activation quantizers, want %d", got, want)
	}
	// the attention's output is quantized by its merge
	if got := count(p.launches, "AttentionMergeQ8_K"); got != layers {
		t.Errorf("decode step: %d quantizing attention merges, want %d", got, layers)
	}
}

// In one-row steps q, k and v are one launch over their matrices stacked
// in one allocation (same type, same activation), into outputs side by
// side; TestPlanMatchesCPU holds the result to the CPU's.
func TestStackedMatVecs(t *testing.T) {
	m := loadModel(t, "synth:qwen3-0.6b/Q8_0")
	p, err := newPlan(m, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	layers := m.Graph.Hyper.Int("block_count")
	plain := 0
	for _, l := range p.launches {
		if strings.HasPrefix(l.k.Name, "MatVecDotQ8_0x") { // not the Add and SwiGLU forms
			plain++
		}
	}
	if want := layers + 1; plain != want { // a stack a block, and the output head
		t.Errorf("decode step: %d plain mat-vecs, want %d", plain, want)
	}
	if got := len(stackedMatVecs(m.Graph, m)); got != layers {
		t.Errorf("%d stacks, want %d (q, k, v a block)", got, layers)
	}
	for _, st := range stackedMatVecs(m.Graph, m) {
		if len(st) != 3 {
			t.Errorf("stack %v: want q, k and v", st)
		}
	}
}

// With AttentionBlock in one-row steps (whatever the heads) the attention
// quantizes its output for the o projection where that is Q8_0's (qwen3's
// Q8_0 synth: one quantizer a block left, the SwiGLU's), and the plan,
// interpreted, still generates what the CPU runner generates.
func TestDecodeAttentionBlock(t *testing.T) {
	defer func(was int) { decodeBlockHeads = was }(decodeBlockHeads)
	decodeBlockHeads = 1
	name := "synth:qwen3-0.6b/Q8_0"
	m := loadModel(t, name)
	p, err := newPlan(m, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	layers := m.Graph.Hyper.Int("block_count")
	count := map[string]int{}
	for _, l := range p.launches {
		switch {
		case strings.HasPrefix(l.k.Name, "AttentionBlock") && strings.HasSuffix(l.k.Name, "Q8_0"):
			count["attention"]++
		case strings.HasPrefix(l.k.Name, "AttentionSplit"):
			count["split"]++
		case l.k.Name == "QuantizeQ8_0":
			count["quantize"]++
		}
	}
	if count["attention"] != layers || count["split"] != 0 || count["quantize"] != layers {
		t.Errorf("decode step: %v, want %d quantizing block attentions, no split, %d quantizers (the SwiGLU's)", count, layers, layers)
	}
	cpu := cpuRunner(t, m, exec.Options{Context: 64})
	agree(t, cpu, newHostExec(p), 4, tolerance(name))
}

// Past each tier's position (decodeSplits) a one-row step attends with
// AttentionBlockSplit + AttentionMerge in the tier's pieces in place of each
// AttentionBlockW1 (a long step, plan.longs, of one launch a layer more;
// the Q8_0 form's merge quantizes as the block attention did), and the
// plan, interpreted across both thresholds, still generates what the CPU
// runner generates. A context that stops short of a tier has no long step
// for it.
func TestDecodeAttentionSplitLong(t *testing.T) {
	defer func(h int, ts []splitTier) { decodeBlockHeads, decodeSplits = h, ts }(decodeBlockHeads, decodeSplits)
	decodeBlockHeads, decodeSplits = 1, []splitTier{{from: 9, chunks: 16}, {from: 20, chunks: 32}}
	for _, c := range []struct{ name, merge string }{
		{"synth:qwen3-0.6b/Q8_0", "AttentionMergeQ8_0"}, {"synth:llama-3.2-1b/Q4_K_M", "AttentionMerge"},
	} {
		m := loadModel(t, c.name)
		p, err := newPlan(m, 64, 4)
		if err != nil {
			t.Fatal(err)
		}
		layers := m.Graph.Hyper.Int("block_count")
		if len(p.longs) != len(decodeSplits) {
			t.Fatalf("%s: %d long steps, want %d", c.name, len(p.longs), len(decodeSplits))
		}
		for i, ls := range p.longs {
			count := map[string]int{}
			chunks := fmt.Sprintf("chunks%d_", decodeSplits[i].chunks)
			for _, l := range ls.launches {
				switch {
				case strings.HasPrefix(l.k.Name, "AttentionBlockSplit"):
					count["split"]++
				case strings.HasPrefix(l.k.Name, c.merge) && strings.Contains(l.k.Name, chunks):
					count["merge"]++
				case strings.HasPrefix(l.k.Name, "AttentionBlock"):
					count["block"]++
				}
			}
			if count["split"] != layers || count["merge"] != layers || count["block"] != 0 || len(ls.launches) != len(p.launches)+layers || ls.from != decodeSplits[i].from {
				t.Errorf("%s: long step %d %v of %d launches from %d, want %d splits and %s merges in %s, %d launches from %d",
					c.name, i, count, len(ls.launches), ls.from, layers, c.merge, chunks, len(p.launches)+layers, decodeSplits[i].from)
			}
		}
		for pos, want := range map[int]int{0: -1, 8: -1, 9: 0, 19: 0, 20: 1, 63: 1} {
			if got := p.longAt(pos); got != want {
				t.Errorf("%s: position %d runs long step %d, want %d", c.name, pos, got, want)
			}
		}
		cpu := cpuRunner(t, m, exec.Options{Context: 64})
		agree(t, cpu, newHostExec(p), 20, tolerance(c.name))
		short, err := newPlan(m, 20, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(short.longs) != 1 {
			t.Errorf("%s: %d long steps in a context of 20 positions, want 1", c.name, len(short.longs))
		}
	}
}

// Every kernel the runner needs for the test models renders for sm_90, as
// one module, and its launch plan is a grid (or a one-thread kernel).
func TestKernelsRender(t *testing.T) {
	for _, name := range models {
		m := loadModel(t, name)
		ks, err := Kernels(m)
		if err != nil {
			t.Fatal(err)
		}
		src, err := ptx.Module(ks, ptx.Target{SM: 90})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		grid, tiled := 0, ""
		for _, k := range ks {
			if strings.HasPrefix(k.Name, "AttentionBlock") {
				tiled = ", prefill attention " + k.Name
			}
			l, err := ptx.Plan(k, ptx.Target{SM: 90})
			if err != nil {
				t.Fatal(err)
			}
			if l.Loop != "" {
				grid++
			}
		}
		t.Logf("%s: %d kernels (%d grid kernels%s), %d bytes of PTX", name, len(ks), grid, tiled, len(src))
	}
}

// Every byte buffer a plan passes starts 16 bytes into its allocation at
// a multiple: the PTX's 16-byte loads rely on it (docs/ptx.md).
func TestByteViewsAligned(t *testing.T) {
	for _, name := range models {
		m := loadModel(t, name)
		p, err := newPlan(m, 64, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, ls := range [][]launch{p.setup, p.launches, p.prefill} {
			for _, l := range ls {
				for i, prm := range l.k.Params {
					if v, ok := l.args[i].(view); ok && prm.Buf.Elem == kernel.U8 && v.off%16 != 0 {
						t.Errorf("%s: %s %s at offset %d", name, l.k.Name, prm.Buf.Name, v.off)
					}
				}
			}
		}
	}
}

// Without a driver the constructor fails with an error callers can test.
func TestNoDriverError(t *testing.T) {
	if cuda.Load() == nil {
		t.Skip("a CUDA driver is present")
	}
	_, err := NewRunner(loadModel(t, "stories260K.gguf"), exec.Options{})
	if !errors.Is(err, cuda.ErrNoDriver) {
		t.Fatalf("want an error wrapping cuda.ErrNoDriver, got %v", err)
	}
}

// Each weight type and form takes its measured shape; output heads 2 rows
// a warp; odd row counts one row; Q8_0's prefetch their rows.
func TestDotShape(t *testing.T) {
	for _, c := range []struct {
		form string
		t    quant.Type
		rows int
		want string
	}{{"", quant.Q4_K, 2048, "x2u2"}, {"Add", quant.Q6_K, 4096, "x2t128u2"}, {"", quant.Q8_0, 1024, "x2t64u2p"},
		{"SwiGLU", quant.Q4_K, 14336, "u2"}, {"", quant.Q6_K, 128256, "x2"}, {"", quant.Q8_0, 151936, "x2p"}, {"SwiGLU", quant.Q8_0, 3072, "u2p"},
		{"", quant.Q4_K, 16385, "u2"}} {
		if got := dotShape(c.form, c.t, c.rows).String(); got != c.want {
			t.Errorf("%s %s %d rows: %s, want %s", c.form, c.t, c.rows, got, c.want)
		}
	}
}

// Q6_K matrices of whole Q6_KA groups go to the device repacked, and every
// kernel that reads them (the embedding, the decode mat-vecs, the prefill
// products' f16 decode) reads that layout: the interpreted plan generates
// what the CPU runner generates and what the plan in Q6_K's own layout
// generates (the mat-vecs' float order aside).
func TestQ6_KAPlanMatchesCPU(t *testing.T) {
	const name = "synth:llama-3.2-1b/Q4_K_M"
	m := loadModel(t, name)
	plans := map[string]*plan{}
	for _, on := range []string{"1", "0"} {
		t.Setenv("JITLLM_Q6KA", on)
		p, err := newPlanTiles(m, 64, 4, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		plans[on] = p
	}
	uses := map[string]map[string]bool{} // kernels reading Q6_KA by name before it, by plan
	for on, p := range plans {
		uses[on] = map[string]bool{}
		for _, ls := range [][]launch{p.launches, p.prefill} {
			for _, l := range ls {
				if before, _, ok := strings.Cut(l.k.Name, "Q6_KA"); ok {
					uses[on][before] = true
				}
			}
		}
	}
	for _, k := range []string{"Embed", "MatVecDot", "DequantF16"} {
		if !uses["1"][k] {
			t.Errorf("no %sQ6_KA launch (have %v)", k, uses["1"])
		}
	}
	if len(uses["0"]) > 0 {
		t.Errorf("JITLLM_Q6KA=0 still reads Q6_KA: %v", uses["0"])
	}
	cpu := cpuRunner(t, m, exec.Options{Context: 64})
	agree(t, cpu, newHostExec(plans["1"]), 2, tolerance(name))
	agree(t, newHostExec(plans["0"]), newHostExec(plans["1"]), 2, 1e-3)
}

// A repacked upload rewrites its bytes a bounded chunk at a time (the
// chunks meet at whole Q6_KA groups) into what one whole repack gives, over
// init bytes and over a stack's parts; a run of bytes that is not whole
// groups is an error, not a short upload.
func TestRepackedUploadInChunks(t *testing.T) {
	groups := repackChunk/ops.Q6_KA.Bytes*2 + 3 // two chunks and a short third
	src := make([]byte, groups*ops.Q6_KA.Bytes)
	for i := range src {
		src[i] = byte(i*131 + i>>9)
	}
	want := make([]byte, len(src))
	if err := ops.RepackQ6_KA(want, src); err != nil {
		t.Fatal(err)
	}
	rp := &repack{ops.RepackQ6_KA, ops.Q6_KA.Bytes}
	cut := 5 * ops.Q6_KA.Bytes
	for name, a := range map[string]alloc{
		"init":  {name: "w", n: len(src), init: src, repack: rp},
		"parts": {name: "w", n: len(src), parts: [][]byte{src[:cut], src[cut:]}, repack: rp},
	} {
		got := make([]byte, len(src))
		calls, most := 0, 0
		if err := a.initBytes(func(off int, b []byte) error {
			copy(got[off:], b)
			calls, most = calls+1, max(most, len(b))
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: chunked repack differs from the whole one", name)
		}
		if most > repackChunk || calls < 3 {
			t.Errorf("%s: %d uploads, the largest %d bytes: want chunks of at most %d", name, calls, most, repackChunk)
		}
	}
	bad := alloc{name: "w", n: 100, init: src[:100], repack: rp}
	if err := bad.initBytes(func(int, []byte) error { return nil }); err == nil {
		t.Error("100 bytes repacked as Q6_KA: no error")
	}
}

// Where the projections do their attention's RoPEs (MatVecDotRopeKV) the
// RopeKVStore launch is gone, and the interpreted plan's logits are those
// of the plan without the fusion, bit for bit: q, k and v in one stack
// (tiny256 Q6_K) and q, k stacked beside a v of another type (Q4_K_M's
// Q6_K attn_v).
func TestRopeMatVecsExact(t *testing.T) {
	for _, name := range []string{"synthetic/tiny256-Q4_K_M.gguf", "synthetic/tiny256-Q6_K.gguf"} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			layers := m.Graph.Hyper.Int("block_count")
			t.Setenv("JITLLM_ROPE_STACK", "0") // the split launch's v sums are not the two launches' bits
			fused, err := newPlan(m, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("JITLLM_ROPE_MATVEC", "0")
			plain, err := newPlan(m, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			count := func(p *plan, prefix string) int {
				n := 0
				for _, l := range p.launches {
					if strings.HasPrefix(l.k.Name, prefix) {
						n++
					}
				}
				return n
			}
			if got := count(fused, "RopeNormalKVStore"); got != 0 {
				t.Errorf("fused plan: %d RopeKVStore launches, want 0", got)
			}
			if got := count(fused, "MatVecDotRopeKV"); got < layers {
				t.Errorf("fused plan: %d MatVecDotRopeKV launches, want %d or more", got, layers)
			}
			if got := count(plain, "RopeNormalKVStore"); got != layers {
				t.Errorf("plain plan: %d RopeKVStore launches, want %d", got, layers)
			}
			if len(fused.launches) != len(plain.launches)-layers {
				t.Errorf("fused plan: %d launches a step, want %d", len(fused.launches), len(plain.launches)-layers)
			}
			a, b := newHostExec(fused), newHostExec(plain)
			toks := append([]int32{}, prompt...)
			for step := 0; step < 4; step++ {
				la, err := a.Forward(toks)
				if err != nil {
					t.Fatal(err)
				}
				lb, err := b.Forward(toks)
				if err != nil {
					t.Fatal(err)
				}
				for i := range la {
					if math.Float32bits(la[i]) != math.Float32bits(lb[i]) {
						t.Fatalf("step %d: logit %d is %v fused, %v plain", step, i, la[i], lb[i])
					}
				}
				toks = []int32{argmax(la)}
			}
		})
	}
}

// Where the o projection is Q4_K (llama's Q4_K_M) the one-row block
// attention quantizes its output to Q8_0 and the projection takes it so
// (MatVecDotAddQ4_KQ8_0): no quantizer between the two, one launch less a
// block than with JITLLM_ATTN_Q8_0=0; the interpreted plan still
// generates what the CPU runner generates.
func TestAttentionQ8_0ForQ4_K(t *testing.T) {
	defer func(was int) { decodeBlockHeads = was }(decodeBlockHeads)
	decodeBlockHeads = 1
	name := "synthetic/tiny256-Q4_K_M.gguf"
	m := loadModel(t, name)
	p, err := newPlan(m, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	layers := m.Graph.Hyper.Int("block_count")
	for i, l := range p.launches {
		if !strings.HasPrefix(l.k.Name, "AttentionBlock") {
			continue
		}
		next := p.launches[i+1].k.Name
		if !strings.HasSuffix(l.k.Name, "Q8_0") || !strings.HasPrefix(next, "MatVecDotAddQ4_KQ8_0") {
			t.Errorf("launch %d: %s then %s, want a quantizing attention then MatVecDotAddQ4_KQ8_0", i, l.k.Name, next)
		}
	}
	t.Setenv("JITLLM_ATTN_Q8_0", "0")
	plain, err := newPlan(m, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.launches) != len(plain.launches)-layers {
		t.Errorf("%d launches a step, want %d (JITLLM_ATTN_Q8_0=0: %d)", len(p.launches), len(plain.launches)-layers, len(plain.launches))
	}
	cpu := cpuRunner(t, m, exec.Options{Context: 64})
	agree(t, cpu, newHostExec(p), 4, tolerance(name))
}

// rowsForwarder is a runner that returns every row's logits of a step.
type rowsForwarder interface {
	forwarder
	ForwardRows([]int32) ([]float32, error)
}

// agreeRows feeds both the prompt, then runs of 1 to the largest verify
// step's rows and 2 more (every step's size, padded and full, and a full
// step then a padded one) as ForwardRows steps: every row's logits within
// logitTol of the CPU's.
func agreeRows(t *testing.T, cpu, other rowsForwarder, logitTol float64) {
	t.Helper()
	if _, err := cpu.Forward(prompt); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Forward(prompt); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	tok := int32(1)
	most := verifyRows[len(verifyRows)-1]
	for _, n := range []int{1, 2, 3, 4, most, most + 2} {
		toks := make([]int32, n)
		for i := range toks {
			toks[i] = tok
			tok = tok*7 + 3
			tok %= 200
		}
		a, err := cpu.ForwardRows(toks)
		if err != nil {
			t.Fatal(err)
		}
		a = append([]float32(nil), a...)
		b, err := other.ForwardRows(toks)
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != len(b) {
			t.Fatalf("%d rows: %d logits, the CPU's %d", n, len(b), len(a))
		}
		v := len(a) / n
		for r := range n {
			d := maxDiff(a[r*v:(r+1)*v], b[r*v:(r+1)*v])
			worst = max(worst, d)
			if d > logitTol {
				t.Fatalf("%d rows, row %d: logits differ by %.3g (> %g)", n, r, d, logitTol)
			}
		}
	}
	t.Logf("largest logit difference %.3g", worst)
}

// The verify step (every row's logits; the integer mat-vecs over all its
// rows at once, DotShape.Acts), interpreted, returns the CPU's logits for
// every row: what speculative decoding checks its drafts against.
func TestVerifyPlanMatchesCPU(t *testing.T) {
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			cpu := cpuRunner(t, m, exec.Options{Context: 64, MaxBatch: 16})
			p, err := newPlan(m, 64, 16)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.verify) != len(verifyRows) {
				t.Fatalf("%d verify steps, want %d", len(p.verify), len(verifyRows))
			}
			for i, v := range p.verify {
				acts := 0
				for _, l := range v.launches {
					if strings.HasSuffix(l.k.Name, fmt.Sprintf("a%d", v.rows)) {
						acts++
					}
				}
				if v.rows != verifyRows[i] {
					t.Errorf("verify step %d: %d rows, want %d", i, v.rows, verifyRows[i])
				}
				t.Logf("%d rows: %d launches, %d integer mat-vecs over them all", v.rows, len(v.launches), acts)
			}
			agreeRows(t, cpu, newHostExec(p), tolerance(name))
		})
	}
}

// The long steps' environment overrides, for comparisons on a device:
// JITLLM_ATTN_SPLIT_FROM moves the first tier and drops those it passes,
// JITLLM_ATTN_CHUNKS leaves one tier of that many pieces.
func TestSplitTiersEnv(t *testing.T) {
	for _, c := range []struct {
		from, chunks string
		want         []splitTier
	}{
		{"", "", decodeSplits},
		{"256", "", append([]splitTier{{256, decodeSplits[0].chunks}}, decodeSplits[1:]...)},
		{"100000", "", []splitTier{{100000, decodeSplits[0].chunks}}},
		{"", "8", []splitTier{{decodeSplits[0].from, 8}}},
		{"1024", "64", []splitTier{{1024, 64}}},
		{"x", "0", decodeSplits},
	} {
		t.Setenv("JITLLM_ATTN_SPLIT_FROM", c.from)
		t.Setenv("JITLLM_ATTN_CHUNKS", c.chunks)
		if got := splitTiers(); !slices.Equal(got, c.want) {
			t.Errorf("SPLIT_FROM %q CHUNKS %q: %v, want %v", c.from, c.chunks, got, c.want)
		}
	}
}

// With JITLLM_SWIGLU_Q8_0=1 a one-row step's SwiGLU quantizes its own
// output to Q8_0 (ops.DotSwiGLUQ8_0) where the down projection after it is
// Q4_K or Q6_KA, which then takes it so (…Q4_KQ8_0, …Q6_KAQ8_0): no
// quantizer launch between the two; the interpreted plan still generates
// what the CPU runner generates, in the SwiGLU's shape (=1) and at 2 rows
// a group (=2).
func TestSwiGLUQ8_0Plan(t *testing.T) {
	for _, c := range []struct{ name, env string }{{"synthetic/tiny256-Q4_K_M.gguf", "1"}, {"synth:llama-3.2-1b/Q4_K_M", "1"}, {"synth:llama-3.2-1b/Q4_K_M", "2"}, {"synth:llama-3.2-1b/Q4_K_M", "count"}} {
		name := c.name
		m := loadModel(t, name)
		plain, err := newPlan(m, 64, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("JITLLM_SWIGLU_Q8_0", c.env)
		p, err := newPlan(m, 64, 4)
		t.Setenv("JITLLM_SWIGLU_Q8_0", "0")
		if err != nil {
			t.Fatal(err)
		}
		folded, layouts := 0, map[string]bool{}
		for i, l := range p.launches {
			if !strings.HasPrefix(l.k.Name, "MatVecDotSwiGLU") || !strings.HasSuffix(l.k.Name, "Q8_0") {
				continue
			}
			folded++
			next := p.launches[i+1].k.Name
			switch {
			case strings.HasPrefix(next, "MatVecDotAddQ4_KQ8_0"):
				layouts["Q4_K"] = true
			case strings.HasPrefix(next, "MatVecDotAddQ6_KAQ8_0"):
				layouts["Q6_KA"] = true
			default:
				t.Errorf("%s: launch %d: %s then %s, want the down projection on a Q8_0 activation", name, i, l.k.Name, next)
			}
		}
		if folded == 0 || len(p.launches) != len(plain.launches)-folded {
			t.Errorf("%s: %d SwiGLUs quantize their output; %d launches a step, %d without", name, folded, len(p.launches), len(plain.launches))
		}
		if c.env == "2" && folded > 0 && !strings.Contains(p.launches[slices.IndexFunc(p.launches, func(l launch) bool {
			return strings.HasSuffix(l.k.Name, "Q8_0") && strings.HasPrefix(l.k.Name, "MatVecDotSwiGLU")
		})].k.Name, "x2") {
			t.Errorf("%s: JITLLM_SWIGLU_Q8_0=2: the folded SwiGLU is not 2 rows a group", name)
		}
		t.Logf("%s (=%s): %d SwiGLUs quantize their output, down projections %v", name, c.env, folded, layouts)
		if _, _, _, _, err := render(p, ptx.Target{SM: 90}, true); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		cpu := cpuRunner(t, m, exec.Options{Context: 64})
		agree(t, cpu, newHostExec(p), 2, tolerance(name))
	}
}

// With JITLLM_NORM_FOLD=1 a one-row step's RMSNorm whose readers all take
// a Q8_0 activation is begun by the residual Add's mat-vec before it
// (ops.DotAddNormQ8_0), its readers scaling their sums by the norm: a
// launch less a norm but the first block's; the interpreted plan (its
// local phases CTA after CTA) still generates what the CPU runner
// generates, alone and with the SwiGLU quantizing its own output.
func TestNormFoldPlan(t *testing.T) {
	for _, c := range []struct {
		name, swiglu string
		folds        int    // the norms folded: every one but the first block's
		fold         string // JITLLM_NORM_FOLD: 1 in local phases, count counted
	}{{"synth:llama-3.2-1b/Q4_K_M", "0", 4, "1"}, {"synth:llama-3.2-1b/Q4_K_M", "1", 4, "1"}, {"synth:qwen3-0.6b/Q8_0", "0", 4, "1"}, {"synthetic/tiny256-Q4_K_M.gguf", "0", -1, "1"},
		{"synth:llama-3.2-1b/Q4_K_M", "count", 3, "count"}, {"synthetic/tiny256-Q4_K_M.gguf", "count", -1, "count"}} {
		m := loadModel(t, c.name)
		t.Setenv("JITLLM_SWIGLU_Q8_0", c.swiglu)
		plain, err := newPlan(m, 64, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("JITLLM_NORM_FOLD", c.fold)
		p, err := newPlan(m, 64, 4)
		t.Setenv("JITLLM_NORM_FOLD", "")
		if err != nil {
			t.Fatal(err)
		}
		folds, readers := 0, map[string]bool{}
		for _, l := range p.launches {
			if strings.Contains(l.k.Name, "NormQ8_0") || strings.Contains(l.k.Name, "NormPartQ8_0") {
				folds++
			}
			if ls, ok := p.matVecs[l.k]; ok && ls.shape.Norm {
				readers[ls.form+ls.layout] = true
			}
			for _, pk := range l.k.Phases {
				if ls, ok := p.matVecs[pk]; ok && ls.shape.Norm {
					readers[ls.form+ls.layout] = true
				}
			}
		}
		t.Logf("%s (SwiGLU Q8_0 %s): %d norms folded, %d launches a step against %d; readers %v", c.name, c.swiglu, folds, len(p.launches), len(plain.launches), readers)
		switch {
		case c.folds < 0 && folds == 0:
			t.Errorf("%s: no norm folded", c.name)
		case c.folds >= 0 && folds != c.folds:
			t.Errorf("%s: %d norms folded, want %d", c.name, folds, c.folds)
		case len(p.launches) != len(plain.launches)-folds:
			t.Errorf("%s: %d launches a step, want %d less %d folded", c.name, len(p.launches), len(plain.launches), folds)
		case len(readers) == 0:
			t.Errorf("%s: no mat-vec scales its sums by a norm", c.name)
		}
		if _, _, _, _, err := render(p, ptx.Target{SM: 90}, true); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		cpu := cpuRunner(t, m, exec.Options{Context: 64})
		agree(t, cpu, newHostExec(p), 2, tolerance(c.name))
	}
	t.Setenv("JITLLM_SWIGLU_Q8_0", "")
}

// JITLLM_Q4K_WIDE gives the Q4_K mat-vecs of 8192 columns or more its
// rows and threads (staged where their slots fit), leaves narrower ones,
// other types and the SwiGLU alone, and ignores a malformed value.
func TestWideQ4KShape(t *testing.T) {
	down := dotKey{"Add", quant.Q4_K, 4096, 14336}
	for _, c := range []struct {
		env  string
		want string
	}{{"", "x2u2"}, {"2,128", "x2t128u2s16128"}, {"1,32", "u2s8064"}, {"2,64", "x2t64u2s16128"}, {"2", "x2u2"}, {"2,48", "x2u2"}} {
		t.Setenv("JITLLM_Q4K_WIDE", c.env)
		p := &plan{}
		if got := p.dotShape(down).String(); got != c.want {
			t.Errorf("JITLLM_Q4K_WIDE=%q: the down projection's shape %s, want %s", c.env, got, c.want)
		}
	}
	// the others keep the rule's shape
	for _, d := range []dotKey{{"Add", quant.Q4_K, 4096, 4096}, {"Add", quant.Q6_K, 4096, 14336}, {"SwiGLU", quant.Q4_K, 14336, 8192}} {
		t.Setenv("JITLLM_Q4K_WIDE", "")
		want := (&plan{}).dotShape(d)
		t.Setenv("JITLLM_Q4K_WIDE", "4,64")
		if got := (&plan{}).dotShape(d); got != want {
			t.Errorf("%+v: shape %s with JITLLM_Q4K_WIDE=4,64, want the rule's %s", d, got, want)
		}
	}
}
