package gpuexec

import (
	"math"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
)

// stageStep is StageStep over the interpreter: the same step bytes, input
// view and output view the device gets.
func (h *hostExec) stageStep(toks []int32, in []float32, n int) []float32 {
	p := h.p
	st := h.mem[p.step].([]int32)
	clear(st)
	st[0], st[1] = int32(n-1), int32(h.pos)
	copy(st[2:], toks)
	ls, inV, outV := p.launches, p.input, p.logits
	if n > 1 {
		ls, inV, outV = p.prefill, p.pinput, p.plogits
	}
	if inV.n > 0 {
		copy(h.slice(inV).([]float32), in)
	}
	if err := h.run(ls); err != nil {
		panic(err)
	}
	h.pos += n
	out := h.slice(outV).([]float32)
	if p.hidden {
		out = out[:n*p.vocab]
	}
	return append([]float32(nil), out...)
}

// The plans of a model's stages, chained, give the whole plan's logits bit
// for bit (interpreted: the launches the GPU would run), prompt in padded
// prefill chunks and decode; and their allocations are the stages' share.
func TestStagePlansMatchWholePlan(t *testing.T) {
	m := loadModel(t, "stories260K.gguf")
	const ctx, rows = 32, 4
	whole, err := newPlan(m, ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	var stages []*hostExec
	for _, c := range [][2]int{{0, 2}, {2, 3}, {3, 5}} {
		sm, err := m.Stage(c[0], c[1])
		if err != nil {
			t.Fatal(err)
		}
		p, err := newPlan(sm, ctx, rows)
		if err != nil {
			t.Fatal(err)
		}
		if p.hidden != (c[1] < 5) || (p.input.n > 0) != (c[0] > 0) {
			t.Fatalf("stage %v: hidden %v, input %+v", c, p.hidden, p.input)
		}
		stages = append(stages, newHostExec(p))
	}
	ref := newHostExec(whole)
	chain := func(toks []int32) []float32 {
		var h []float32
		for _, s := range stages {
			h = s.stageStep(toks, h, len(toks))
		}
		return h
	}
	want, err := ref.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	for p := prompt; len(p) > 0; p = p[min(rows, len(p)):] {
		got = chain(p[:min(rows, len(p))])
	}
	for step := 0; step < 3; step++ {
		if len(got) != len(want) {
			t.Fatalf("step %d: %d logits, want %d", step, len(got), len(want))
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("step %d: logit %d is %v, want %v", step, i, got[i], want[i])
			}
		}
		tok := argmax(want)
		got = chain([]int32{tok})
		if want, err = ref.Forward([]int32{tok}); err != nil {
			t.Fatal(err)
		}
	}
	// Split estimates: each stage holds its blocks' weights and caches only.
	all, err := EstimateBytes(m, ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, c := range [][2]int{{0, 2}, {2, 5}} {
		sm, _ := m.Stage(c[0], c[1])
		e, err := EstimateBytes(sm, ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e >= all {
			t.Errorf("stage %v estimated %d bytes, the whole model %d", c, e, all)
		}
		sum += e - DeviceOverhead
	}
	if sum < all-DeviceOverhead {
		t.Errorf("stages sum to %d bytes, less than the whole model's %d", sum, all-DeviceOverhead)
	}
}

// Two stages on one device (two runners, each with its own stream, module
// and allocations in the device's context) generate the whole runner's
// greedy tokens. Needs a GPU.
func TestGPUTwoStagesOneDevice(t *testing.T) {
	needGPU(t)
	for _, name := range []string{"stories260K.gguf", "synthetic/tiny256-Q4_K_M.gguf"} {
		m := loadModel(t, name)
		opt := exec.Options{Context: 128}
		whole := gpuRunner(t, m, opt)
		cut := m.Graph.Layers / 2
		var stages []*Runner
		for _, c := range [][2]int{{0, cut}, {cut, m.Graph.Layers}} {
			sm, err := m.Stage(c[0], c[1])
			if err != nil {
				t.Fatal(err)
			}
			stages = append(stages, gpuRunner(t, sm, opt))
		}
		chain := func(toks []int32) []float32 {
			var h []float32
			for i, s := range stages {
				out, err := s.StageStep(toks, h, len(toks))
				if err != nil {
					t.Fatalf("%s stage %d: %v", name, i, err)
				}
				h = append(h[:0:0], out...)
			}
			return h
		}
		// a prompt past the largest verify step: the whole runner's
		// Forward runs 2-9 tokens as a verify step (integer mat-vecs)
		// where stage steps run prefill steps (the tensor cores), other
		// roundings that a near tie turns into other tokens
		long := prompt
		for len(long) <= verifyRows[len(verifyRows)-1] {
			long = append(long[:len(long):len(long)], prompt...)
		}
		want, err := whole.Forward(long)
		if err != nil {
			t.Fatal(err)
		}
		rows := stages[0].MaxRows()
		var got []float32
		for p := long; len(p) > 0; p = p[min(rows, len(p)):] {
			got = chain(p[:min(rows, len(p))])
		}
		for step := 0; step < 16; step++ {
			if a, b := argmax(got), argmax(want); a != b {
				t.Fatalf("%s step %d: split chose %d, whole %d", name, step, a, b)
			}
			if d := maxDiff(got, want); d > tolerance(name) {
				t.Errorf("%s step %d: logits differ by %g", name, step, d)
			}
			tok := argmax(want)
			got = chain([]int32{tok})
			if want, err = whole.Forward([]int32{tok}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
