package cpugen

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/gosrc"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// call calls f with args and returns its result, if any.
func call(f any, args []any) any {
	in := make([]reflect.Value, len(args))
	for i, a := range args {
		in[i] = reflect.ValueOf(a)
	}
	out := reflect.ValueOf(f).Call(in)
	if len(out) == 0 {
		return nil
	}
	return out[0].Interface()
}

// sameBits compares every slice argument: float outputs bit for bit, and
// the byte and f16 caches a store kernel writes.
func sameBits(t *testing.T, what string, got, want []any) {
	t.Helper()
	for i := range want {
		switch w := want[i].(type) {
		case []float32:
			g := got[i].([]float32)
			for j := range w {
				if math.Float32bits(g[j]) != math.Float32bits(w[j]) {
					t.Fatalf("%s: arg %d [%d] = %v, interpreter says %v", what, i, j, g[j], w[j])
				}
			}
		case []byte:
			sameElems(t, what, i, got[i].([]byte), w)
		case []uint16:
			sameElems(t, what, i, got[i].([]uint16), w)
		case []int32:
			sameElems(t, what, i, got[i].([]int32), w)
		}
	}
}

func sameElems[E comparable](t *testing.T, what string, arg int, got, want []E) {
	t.Helper()
	for j := range want {
		if got[j] != want[j] {
			t.Fatalf("%s: arg %d [%d] = %v, interpreter says %v", what, arg, j, got[j], want[j])
		}
	}
}

// Every generated function computes the interpreter's bits, on several
// inputs each; a kernel without a generated function fails.
func TestGeneratedMatchesInterpreter(t *testing.T) {
	n := 0
	for _, ks := range ops.Groups() {
		for _, k := range ks {
			f, ok := Funcs[k.Name]
			if !ok {
				t.Fatalf("%s: not generated (run go generate)", k.Name)
			}
			for seed := uint64(1); seed <= 4; seed++ {
				want, got := opstest.Args(k.Name, seed), opstest.Args(k.Name, seed)
				if k.Result != nil {
					w, err := kernel.Call(k, want...)
					if err != nil {
						t.Fatal(err)
					}
					if g := call(f, got); math.Float32bits(g.(float32)) != math.Float32bits(w.(float32)) {
						t.Fatalf("%s: returns %v, interpreter says %v", k.Name, g, w)
					}
					continue
				}
				if err := kernel.Run(k, want...); err != nil {
					t.Fatal(err)
				}
				call(f, got)
				sameBits(t, k.Name, got, want)
			}
			n++
		}
	}
	if n != len(Funcs) {
		t.Fatalf("%d kernels, %d generated functions", n, len(Funcs))
	}
}

// The generated decodes are ggml's, as kernels/quant has them.
func TestDequantMatchesQuant(t *testing.T) {
	for _, d := range ops.Blocks() {
		for seed := uint64(1); seed <= 4; seed++ {
			args := opstest.Args("Dequant"+d.Name, seed)
			src, dst := args[0].([]byte), args[1].([]float32)
			want := make([]float32, len(dst))
			if err := quant.Dequantize(opstest.Types[d.Name], src, want); err != nil {
				t.Fatal(err)
			}
			call(Funcs["Dequant"+d.Name], args)
			sameBits(t, d.Name, []any{dst}, []any{want})
		}
	}
}

func TestF16Table(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if g, w := math.Float32bits(f16tof32(uint16(h))), math.Float32bits(kernel.F16ToF32(uint16(h))); g != w {
			t.Fatalf("f16 %#04x: %#x, want %#x", h, g, w)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	dq := opstest.Args("DequantQ4_K", 1)
	mv := opstest.Args("MatVecQ6_K", 1)
	rn := opstest.Args("RMSNorm", 1)
	rp := opstest.Args("RopeNeox", 1)
	x, y := rn[0].([]float32), rn[2].([]float32)
	for name, f := range map[string]func(){
		"DequantQ4_K": func() { DequantQ4_K(dq[0].([]byte), dq[1].([]float32)) },
		"MatVecQ6_K":  func() { MatVecQ6_K(mv[0].([]byte), mv[1].([]float32), mv[2].([]float32)) },
		"RMSNorm":     func() { RMSNorm(x, rn[1].([]float32), y, 1e-6) },
		"Softmax":     func() { Softmax(x, y) },
		"RopeNeox":    func() { RopeNeox(rp[0].([]float32), rp[1].([]float32), 7, 64, 48, 10000, 1) },
	} {
		if a := testing.AllocsPerRun(10, f); a != 0 {
			t.Errorf("%s allocates %v times", name, a)
		}
	}
}

// The checked-in files are what the generator writes now.
func TestGeneratedFilesCurrent(t *testing.T) {
	tmp := t.TempDir()
	if err := gosrc.WriteDir(tmp, "cpugen", ops.Groups()); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Glob(filepath.Join(tmp, "zz_*.go"))
	have, _ := filepath.Glob("zz_*.go")
	names := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		sort.Strings(out)
		return out
	}
	if !reflect.DeepEqual(names(want), names(have)) {
		t.Fatalf("generated files %v, checked in %v (run go generate ./kernels/cpugen)", names(want), names(have))
	}
	for _, p := range want {
		w, _ := os.ReadFile(p)
		h, err := os.ReadFile(filepath.Base(p))
		if err != nil || !bytes.Equal(w, h) {
			t.Errorf("%s is stale (run go generate ./kernels/cpugen)", filepath.Base(p))
		}
	}
}

func BenchmarkDequantQ4_K(b *testing.B) {
	a := opstest.Args("DequantQ4_K", 1)
	src, dst := a[0].([]byte), a[1].([]float32)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		DequantQ4_K(src, dst)
	}
}

func BenchmarkDequantQ4_KQuant(b *testing.B) {
	a := opstest.Args("DequantQ4_K", 1)
	src, dst := a[0].([]byte), a[1].([]float32)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		_ = quant.Dequantize(quant.Q4_K, src, dst)
	}
}

func BenchmarkMatVecQ4_0(b *testing.B) {
	a := opstest.Args("MatVecQ4_0", 1)
	w, x, y := a[0].([]byte), a[1].([]float32), a[2].([]float32)
	b.SetBytes(int64(len(w)))
	for b.Loop() {
		MatVecQ4_0(w, x, y)
	}
}
