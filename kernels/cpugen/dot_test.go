package cpugen

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/gguf"
)

type dotFunc = func(n int, w, x []byte) float32

func dotFn(t *testing.T, d ops.Dot) dotFunc {
	f, ok := Funcs[d.Kernel.Name].(dotFunc)
	if !ok {
		t.Fatalf("%s: not generated as a row dot (run go generate)", d.Kernel.Name)
	}
	return f
}

func sameDot(t *testing.T, what string, n int, got, want float32) {
	t.Helper()
	if math.Float32bits(got) != math.Float32bits(want) {
		t.Fatalf("%s n=%d: %v (%#x), kernels/quant says %v (%#x)", what, n, got, math.Float32bits(got), want, math.Float32bits(want))
	}
}

// The generated row dots are the kernels/quant ones bit for bit, on random
// rows of many lengths (the float kernels' tails included).
func TestDotMatchesQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, d := range ops.Dots() {
		f, ref := dotFn(t, d), opstest.DotReference(d)
		for row := 0; row < 200; row++ {
			n := d.QK * max(1, 16/d.QK) * (1 + r.IntN(48))
			a := opstest.DotArgs(d, n, r)
			w, x := a[1].([]byte), a[2].([]byte)
			sameDot(t, d.Kernel.Name, n, f(n, w, x), ref(n, w, x))
		}
	}
}

// On the weights llama-quantize wrote (testdata/synthetic), against
// activations quantized as the matmul quantizes them.
func TestDotRealRows(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/synthetic/*.gguf")
	if len(paths) == 0 {
		t.Skip("no testdata/synthetic/*.gguf")
	}
	r := rand.New(rand.NewPCG(23, 24))
	checked := map[string]int{}
	for _, p := range paths {
		gf, err := gguf.Open(p)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		for i := range gf.Tensors {
			ti := &gf.Tensors[i]
			if len(ti.Dims) != 2 {
				continue
			}
			n := int(ti.Dims[0])
			var data []byte
			for _, d := range ops.Dots() {
				if d.W != ti.Type.String() || n%d.QK != 0 {
					continue
				}
				if data == nil {
					if data, err = gf.Data(ti); err != nil {
						t.Fatal(err)
					}
				}
				f, ref := dotFn(t, d), opstest.DotReference(d)
				rb := quant.RowSize(ti.Type, n)
				x := opstest.Row(opstest.Type(d.X), n, nil, r)
				for j := 0; j < int(ti.Dims[1]); j += 7 {
					w := data[j*rb : (j+1)*rb]
					sameDot(t, d.Kernel.Name+" "+ti.Name, n, f(n, w, x), ref(n, w, x))
					checked[d.Kernel.Name]++
				}
			}
		}
		gf.Close()
	}
	for _, d := range ops.Dots() {
		if checked[d.Kernel.Name] == 0 && d.W != "F32" { // the synthetic files keep F32 only for norms
			t.Errorf("%s: no real rows checked", d.Kernel.Name)
		}
	}
	t.Logf("real rows checked: %v", checked)
}

func TestDotNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, d := range ops.Dots() {
		f := dotFn(t, d)
		a := opstest.DotArgs(d, 512, r)
		w, x := a[1].([]byte), a[2].([]byte)
		if n := testing.AllocsPerRun(10, func() { f(512, w, x) }); n != 0 {
			t.Errorf("%s allocates %v times", d.Kernel.Name, n)
		}
	}
}

func BenchmarkDotQ4_0AVX2(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	w := opstest.Blocks(ops.Q4_0, 4096/32, r)
	x := opstest.Row(quant.Q8_0, 4096, nil, r)
	b.Run("generated", func(b *testing.B) {
		for b.Loop() {
			DotQ4_0AVX2(4096, w, x)
		}
	})
	b.Run("quant", func(b *testing.B) {
		for b.Loop() {
			quant.DotQ4_0AVX2(4096, w, x)
		}
	})
}
