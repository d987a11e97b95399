package gpuexec

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/meta"
)

// bf16Model writes the GGUF at src with every float matrix in BF16 (each
// value rounded by quant.F32ToBF16) and its vectors as they are: what
// jitllm convert keeps of a Hugging Face checkpoint stored in bf16.
func bf16Model(t testing.TB, src string) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ts []gguf.WriteTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		data, err := f.Data(ti)
		if err != nil {
			t.Fatal(err)
		}
		wt := gguf.WriteTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: gguf.Bytes(data)}
		if len(ti.Dims) >= 2 && (ti.Type == quant.F32 || ti.Type == quant.F16) {
			v := make([]float32, ti.Elements())
			if err := quant.Dequantize(ti.Type, data, v); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 2*len(v))
			if err := quant.Quantize(quant.BF16, v, b); err != nil {
				t.Fatal(err)
			}
			wt.Type, wt.Data = quant.BF16, gguf.Bytes(b)
		}
		ts = append(ts, wt)
	}
	f.Meta.Set("general.file_type", meta.U32(32)) // llama.cpp's MOSTLY_BF16
	path := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".gguf")+"-BF16.gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := gguf.Write(out, f.Meta, ts); err != nil {
		t.Fatal(err)
	}
	return path
}

// A float model's plan reads its matrices with its type's kernels only:
// the embedding by Embed<T>, the decode mat-vecs by MatVecWarp<T>, the
// prefill products on the tensor cores from f16 copies (DequantF16<T>; the
// activation rounded as the mat-vec rounds it, by Round<T>), where a
// launch a row would read the whole matrix a row; before sm_80 (no tiles)
// a prefill step runs MatVecWarp<T> a row. Interpreted, the plan reading
// resident copies generates what the CPU runner generates (TestPlanMatchesCPU
// runs the shared scratch's).
func TestFloatPlans(t *testing.T) {
	for _, c := range []struct {
		model string
		typ   quant.Type
		round string // the prefill activation's rounding
	}{{bf16Name, quant.BF16, "RoundBF16F16"}, {"synthetic/tiny256-F16.gguf", quant.F16, "RoundF16"}} {
		ty := c.typ.String()
		embed, mv, deq := "Embed"+ty, "MatVecWarp"+ty, "DequantF16"+ty
		m := loadModel(t, c.model)
		mats := 0
		for _, n := range m.Graph.Nodes {
			if n.Weight >= 0 && len(m.Weights[n.Weight].Dims) >= 2 {
				if typ := m.Weights[n.Weight].Type; typ != c.typ {
					t.Fatalf("%s: %s is %s, want %s", c.model, m.Weights[n.Weight].GGUF, typ, ty)
				}
				mats++
			}
		}
		count := func(ls []launch) map[string]int {
			n := map[string]int{}
			for _, l := range ls {
				name, _, _ := strings.Cut(l.k.Name, " ")
				if strings.HasPrefix(name, "MatMulBlock") {
					name = "MatMulBlock"
				}
				n[name]++
			}
			return n
		}
		for _, pc := range []struct {
			tiles  bool
			budget int64
		}{{true, 0}, {true, 1 << 40}, {false, 0}} {
			p, err := newPlanTiles(m, 64, 4, pc.tiles, pc.budget)
			if err != nil {
				t.Fatal(err)
			}
			decode, prefill, setup := count(p.launches), count(p.prefill), count(p.setup)
			if decode[embed] != 1 || prefill[embed] != 1 || decode[mv] != mats-1 {
				t.Errorf("%s, tiles %v: one-row step %v", c.model, pc.tiles, decode)
			}
			switch {
			case !pc.tiles:
				// the logits' one row, and every other matrix a row at a time
				if prefill[mv] != 1+4*(mats-2) || prefill["MatMulBlock"] != 0 {
					t.Errorf("%s, no tiles: prefill step %v", c.model, prefill)
				}
			case pc.budget == 0:
				if prefill["MatMulBlock"] != mats-2 || prefill[deq] != mats-2 || prefill[c.round] == 0 || prefill[mv] != 1 {
					t.Errorf("%s, shared f16 scratch: prefill step %v", c.model, prefill)
				}
			default:
				// the logits' matrix too: the verify steps multiply it on the tiles
				if prefill["MatMulBlock"] != mats-2 || prefill[deq] != 0 || setup[deq] != mats-1 {
					t.Errorf("%s, resident f16 copies: prefill step %v, setup %v", c.model, prefill, setup)
				}
			}
		}
		p, err := newPlanTiles(m, 64, 4, true, 1<<40)
		if err != nil {
			t.Fatal(err)
		}
		cpu := cpuRunner(t, m, exec.Options{Context: 64})
		agree(t, cpu, newHostExec(p), 1, tolerance(c.model))
	}
}

// TestGPUBF16Kernels checks the BF16 kernels on the device bit for bit:
// RoundBF16F16 against kernels/quant's roundings over every bf16 value's
// neighbourhood, signaling NaNs included (which the interpreter cannot
// hold: its f32s are float64s); DequantF16BF16 and EmbedBF16 over all
// 65536 bf16 values; MatVecWarpBF16 against the interpreter (the same
// tree of f64 sums).
func TestGPUBF16Kernels(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	round, deq, embed, mv := ops.RoundBF16F16(), ops.DequantF16(ops.BF16), ops.Embed(ops.BF16), ops.MatVecWarpBF16()
	mod, tg := loadKernels(t, c, round, deq, embed, mv)
	run := func(k *kernel.Kernel, bufs []cuda.Buffer, lens []int, scalars ...int) {
		t.Helper()
		a := cuda.NewArgs(2*len(bufs) + len(scalars))
		var sizes []any
		for i, b := range bufs {
			a.Set(2*i, b.Ptr)
			a.Set(2*i+1, uint64(lens[i]))
			sizes = append(sizes, ptx.Elems(lens[i]))
		}
		for i, v := range scalars {
			a.Set(2*len(bufs)+i, uint64(v))
			sizes = append(sizes, v)
		}
		launcher(t, mod, tg, s, k, a, sizes...)()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	download := func(b cuda.Buffer, n int) []byte {
		t.Helper()
		out := make([]byte, n)
		if err := b.Download(out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	var xs []uint32
	for h := uint32(0); h < 1<<16; h++ {
		xs = append(xs, h<<16, h<<16+0x7fff, h<<16+0x8000, h<<16+0x8001, h<<16+0xffff)
	}
	xb := make([]byte, 4*len(xs))
	for i, u := range xs {
		xb[4*i], xb[4*i+1], xb[4*i+2], xb[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	xd, yd := upload(t, c, xb), zeroed(t, c, 2*len(xs))
	run(round, []cuda.Buffer{xd, yd}, []int{len(xs), len(xs)})
	got := download(yd, 2*len(xs))
	for i, u := range xs {
		want := quant.F32ToF16(quant.BF16ToF32(quant.F32ToBF16(math.Float32frombits(u))))
		if g := uint16(got[2*i]) | uint16(got[2*i+1])<<8; g != want {
			t.Fatalf("RoundBF16F16 of %#08x: %#04x, want %#04x", u, g, want)
		}
	}

	all := make([]byte, 2<<16) // every bf16 value, in order
	for h := range 1 << 16 {
		all[2*h], all[2*h+1] = byte(h), byte(h>>8)
	}
	wd, hd := upload(t, c, all), zeroed(t, c, 2<<16)
	run(deq, []cuda.Buffer{wd, hd}, []int{len(all), 1 << 16})
	got = download(hd, 2<<16)
	for h := range 1 << 16 {
		if g, want := uint16(got[2*h])|uint16(got[2*h+1])<<8, quant.F32ToF16(quant.BF16ToF32(uint16(h))); g != want {
			t.Fatalf("DequantF16BF16 of %#04x: %#04x, want %#04x", h, g, want)
		}
	}

	const cols = 64 // all as a vocabulary of 1024 rows, looked up backwards
	tok := make([]int32, (1<<16)/cols)
	tb := make([]byte, 4*len(tok))
	for i := range tok {
		tok[i] = int32(len(tok) - 1 - i)
		tb[4*i], tb[4*i+1], tb[4*i+2], tb[4*i+3] = byte(tok[i]), byte(tok[i]>>8), byte(tok[i]>>16), byte(tok[i]>>24)
	}
	td, ed := upload(t, c, tb), zeroed(t, c, 4<<16)
	run(embed, []cuda.Buffer{wd, td, ed}, []int{len(all), len(tok), 1 << 16}, cols)
	emb := f32sFrom(download(ed, 4<<16))
	for r, id := range tok {
		for j := range cols {
			h := int(id)*cols + j
			if g, want := math.Float32bits(emb[r*cols+j]), math.Float32bits(quant.BF16ToF32(uint16(h))); g != want {
				t.Fatalf("EmbedBF16 of %#04x: %#08x, want %#08x", h, g, want)
			}
		}
	}

	r := rand.New(rand.NewPCG(31, 32))
	for _, n := range []int{7, 256, 2053} {
		const rows = 9
		v := make([]float32, rows*n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.05)
		}
		w := make([]byte, 2*len(v))
		if err := quant.Quantize(quant.BF16, v, w); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
		want := make([]float32, rows)
		if err := kernel.Run(mv, w, x, want); err != nil {
			t.Fatal(err)
		}
		wd, xd, yd := upload(t, c, w), upload(t, c, f32Bytes(x)), zeroed(t, c, 4*rows)
		run(mv, []cuda.Buffer{wd, xd, yd}, []int{len(w), n, rows})
		for i, g := range f32sFrom(download(yd, 4*rows)) {
			if math.Float32bits(g) != math.Float32bits(want[i]) {
				t.Errorf("MatVecWarpBF16 n=%d row %d: device %v, interpreter %v", n, i, g, want[i])
			}
		}
	}
}
