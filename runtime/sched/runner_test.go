package sched

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

const testdata = "../../testdata"

func loadModel(t testing.TB, name string) *exec.Model {
	t.Helper()
	src, err := weights.Open(filepath.Join(testdata, name))
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

// cpuStages is a placement of m on CPU stages cut at cuts.
func cpuStages(cuts ...int) Placement {
	var p Placement
	for i := 0; i+1 < len(cuts); i++ {
		p = append(p, Stage{Device: Device{ID: "cpu", Kind: "cpu", Speed: 1}, Lo: cuts[i], Hi: cuts[i+1]})
	}
	return p
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// prompt has 13 tokens: three full pieces of 4 rows and a one-row piece.
var prompt = []int32{1, 403, 407, 261, 378, 286, 310, 331, 263, 265, 300, 270, 290}

// A CPU+CPU pipeline, its prompt in pieces that flow through the stages at
// once, gives the single runner's logits bit for bit, prompt and decode.
func TestCPUSplitMatchesRunner(t *testing.T) {
	for _, tc := range []struct {
		model string
		cuts  []int
	}{
		{"stories260K.gguf", []int{0, 2, 5}},
		{"stories260K.gguf", []int{0, 1, 2, 4, 5}},
		{"synthetic/tiny256-Q4_K_M.gguf", []int{0, 1, 2}},
		{"synthetic/tiny256-Q8_0.gguf", []int{0, 1, 2}},
	} {
		m := loadModel(t, tc.model)
		const piece = 4
		eo := exec.Options{Threads: 1, MaxBatch: piece, Context: 64}
		single, err := exec.NewRunner(m, eo)
		if err != nil {
			t.Fatal(err)
		}
		defer single.Close()
		split, err := New(m, cpuStages(tc.cuts...), Options{Options: eo, Piece: piece})
		if err != nil {
			t.Fatal(err)
		}
		defer split.Close()
		if split.Piece() != piece || len(split.Stages()) != len(tc.cuts)-1 {
			t.Fatalf("piece %d, %d stages", split.Piece(), len(split.Stages()))
		}
		want, err := single.Forward(prompt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := split.Forward(prompt)
		if err != nil {
			t.Fatal(err)
		}
		for step := 0; step < 8; step++ {
			if i := sameBits(got, want); i >= 0 {
				t.Fatalf("%s %v step %d: logits differ at %d (%d vs %d values)", tc.model, tc.cuts, step, i, len(got), len(want))
			}
			tok := argmax(want)
			if want, err = single.Forward([]int32{tok}); err != nil {
				t.Fatal(err)
			}
			if got, err = split.Forward([]int32{tok}); err != nil {
				t.Fatal(err)
			}
		}
		if split.Pos() != single.Pos() {
			t.Errorf("split at %d, single at %d", split.Pos(), single.Pos())
		}
		// Rewinding and feeding a prompt again gives the same numbers.
		split.Truncate(0)
		single.Truncate(0)
		want, _ = single.Forward(prompt[:9])
		if got, err = split.Forward(prompt[:9]); err != nil || sameBits(got, want) >= 0 {
			t.Fatalf("%s after truncate: %v", tc.model, err)
		}
	}
}

// A failing piece stops the pipeline and rewinds every stage.
func TestPipelineErrorRewinds(t *testing.T) {
	m := loadModel(t, "stories260K.gguf")
	eo := exec.Options{Threads: 1, Context: 64}
	r, err := New(m, cpuStages(0, 3, 5), Options{Options: eo, Piece: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Forward(prompt[:3]); err != nil {
		t.Fatal(err)
	}
	bad := append(append([]int32(nil), prompt[:7]...), 9999) // outside the vocabulary, in the last piece
	if _, err := r.Forward(bad); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Fatalf("bad token: %v", err)
	}
	for i, s := range r.stages {
		if s.r.Pos() != 3 {
			t.Errorf("stage %d at %d after the error, want 3", i, s.r.Pos())
		}
	}
	if _, err := r.Forward(make([]int32, 62)); err == nil {
		t.Error("a prompt past the context accepted")
	}
	if _, err := New(m, cpuStages(0, 2), Options{Options: eo}); err == nil {
		t.Error("a placement short of the last block accepted")
	}
	if _, err := New(m, cpuStages(0, 5), Options{Options: exec.Options{LogitsAll: true}}); err == nil {
		t.Error("LogitsAll accepted")
	}
}

// Costs count every weight once (the tied embedding twice) and each block's
// KV cache; the plan places a real model on the host's CPU twice over.
func TestCostsAndPlan(t *testing.T) {
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	c, err := CostsOf(m, 64)
	if err != nil {
		t.Fatal(err)
	}
	var weights int64
	for _, w := range m.Weights {
		weights += int64(len(w.Data))
	}
	var kv int64
	for _, n := range m.Graph.Nodes {
		if n.Attn.KVHeads > 0 {
			kv += 2 * 64 * int64(n.Attn.KVHeads*n.Attn.HeadDim) * 2
		}
	}
	if got := c.whole(); got < weights+kv || got > weights+kv+c.Head {
		t.Errorf("costs %d bytes; weights %d + kv %d", got, weights, kv)
	}
	devs := []Device{{ID: "cpu", Kind: "cpu", Free: 1 << 40, Speed: 1}, {ID: "cpu", Kind: "cpu", Free: 1 << 40, Speed: 1}}
	pl, err := PlanOn(m, devs, Options{Options: exec.Options{Context: 64}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl) != 2 || pl[0].Device.Fixed <= 0 {
		t.Fatalf("placement %v (fixed %d)", pl, pl[0].Device.Fixed)
	}
	devs[0].Free, devs[1].Free = 1<<20, 1<<20
	if _, err := PlanOn(m, devs, Options{Options: exec.Options{Context: 64}}, false); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("1 MiB devices: %v", err)
	}
	if s := CPUSpeed(); s < 1e8 {
		t.Errorf("measured CPU read speed %g bytes/s", s)
	}
}

func needGPU(t *testing.T) {
	t.Helper()
	if err := cuda.Load(); err != nil {
		t.Skipf("no GPU here: %v", err)
	}
	if devs, err := cuda.Devices(); err != nil || len(devs) == 0 {
		t.Skipf("no usable GPU: %v", err)
	}
}

// Splits with a GPU stage generate the CPU runner's greedy tokens: two
// stages on the one GPU, CPU then GPU and GPU then CPU, placed by PlanOn
// from the devices' free memory and speed, the prompt pipelined in pieces
// of 4 rows (a GPU stage pads them to its prefill rows). Needs a GPU.
func TestGPUSplitsMatchCPU(t *testing.T) {
	needGPU(t)
	for _, spec := range []string{"cuda:0,cuda:0", "cpu,cuda:0", "cuda:0,cpu"} {
		for _, name := range []string{"stories260K.gguf", "synthetic/tiny256-Q4_K_M.gguf"} {
			m := loadModel(t, name)
			ids, err := ParseList(spec)
			if err != nil {
				t.Fatal(err)
			}
			eo := exec.Options{Context: 128}
			r, err := Open(m, ids, Options{Options: eo, Piece: 4}, false) // the prompt pipelined in 4 pieces
			if err != nil {
				t.Fatalf("%s %s: %v", spec, name, err)
			}
			cpu, err := exec.NewRunner(m, eo)
			if err != nil {
				t.Fatal(err)
			}
			want, err := cpu.Forward(prompt)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Forward(prompt)
			if err != nil {
				t.Fatalf("%s %s: %v", spec, name, err)
			}
			for step := 0; step < 24; step++ {
				if a, b := argmax(got), argmax(want); a != b {
					t.Fatalf("%s %s (%v) step %d: split chose %d, CPU %d", spec, name, r.Stages(), step, a, b)
				}
				tok := argmax(want)
				if want, err = cpu.Forward([]int32{tok}); err != nil {
					t.Fatal(err)
				}
				if got, err = r.Forward([]int32{tok}); err != nil {
					t.Fatal(err)
				}
			}
			var devs []string
			for _, st := range r.Stages() {
				devs = append(devs, fmt.Sprintf("%s %.1f GB/s, %.1f GiB free, stage %.1f MiB", st.Device.ID, st.Device.Speed/1e9, float64(st.Device.Free)/(1<<30), float64(st.Bytes)/(1<<20)))
			}
			t.Logf("%s %s: %s, 24 greedy tokens equal the CPU runner's (%s)", spec, name, r.Stages().Short(), strings.Join(devs, "; "))
			r.Close()
			cpu.Close()
		}
	}
}

// A decode step through CPU stages allocates nothing.
func TestSplitDecodeAllocatesNothing(t *testing.T) {
	m := loadModel(t, "stories260K.gguf")
	r, err := New(m, cpuStages(0, 2, 5), Options{Options: exec.Options{Threads: 1, Context: 512}, Piece: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Forward(prompt); err != nil {
		t.Fatal(err)
	}
	tok := []int32{403}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := r.Forward(tok); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a decode step", n)
	}
}

// Rows carried between GPU stages on the devices (device-to-device copies
// on one GPU, peer copies between two) give the logits that the trip
// through host memory gives, bit for bit: the same stage computations on
// the same rows. With a second GPU the links are peer copies.
func TestGPUDeviceLinksMatchHostLinks(t *testing.T) {
	needGPU(t)
	specs := []string{"cuda:0,cuda:0,cuda:0", "cuda:0,cuda:0,cpu"}
	if devs, err := cuda.Devices(); err == nil && len(devs) > 1 {
		specs = append(specs, "cuda:0,cuda:1", "cuda:1,cuda:0,cuda:1")
	} else {
		t.Log("one GPU: no peer copies between two devices (same-device links only)")
	}
	m := loadModel(t, "stories260K.gguf") // 5 blocks: three stages
	for _, spec := range specs {
		ids, err := ParseList(spec)
		if err != nil {
			t.Fatal(err)
		}
		var runs [2]*Runner
		for i, host := range []bool{false, true} {
			o := Options{Options: exec.Options{Context: 128}, Piece: 4, HostLinks: host}
			if runs[i], err = Open(m, ids, o, false); err != nil {
				t.Fatalf("%s (host links %v): %v", spec, host, err)
			}
			defer runs[i].Close()
		}
		onDevice := 0
		for _, l := range runs[0].links {
			if l.onDevice() {
				onDevice++
			}
		}
		if onDevice == 0 || runs[1].links[0].onDevice() {
			t.Fatalf("%s: %d links on the devices; the host-links runner's first on the device: %v", spec, onDevice, runs[1].links[0].onDevice())
		}
		toks := prompt
		for step := 0; step < 12; step++ {
			var out [2][]float32
			for i, r := range runs {
				o, err := r.Forward(toks)
				if err != nil {
					t.Fatalf("%s step %d: %v", spec, step, err)
				}
				out[i] = append([]float32(nil), o...)
			}
			if i := sameBits(out[0], out[1]); i >= 0 {
				t.Fatalf("%s step %d: logit %d is %v with device links, %v through the host", spec, step, i, out[0][i], out[1][i])
			}
			toks = []int32{argmax(out[0])}
		}
		t.Logf("%s (%s): %d of %d links on the devices; 12 steps bit-identical to host links", spec, runs[0].Stages().Short(), onDevice, len(runs[0].links))
	}
}
