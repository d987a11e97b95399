package quant_test

// Checks against files quantized by llama.cpp's llama-quantize: decoding
// must reproduce the source weights within each format's error, and our
// reference quantizers must reproduce llama-quantize's bytes exactly (it uses
// the same reference code when no importance matrix is given).

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/gguf"
)

const testdata = "../../testdata"

// rmsBound is the largest relative RMS error accepted per format.
var rmsBound = map[quant.Type]float64{
	quant.F16: 1e-3, quant.Q8_0: 0.01, quant.Q6_K: 0.03, quant.Q5_K: 0.06, quant.Q5_0: 0.07, quant.Q5_1: 0.07,
	quant.Q4_K: 0.12, quant.Q4_0: 0.15, quant.Q4_1: 0.15, quant.IQ4_NL: 0.15, quant.IQ4_XS: 0.15,
	quant.Q3_K: 0.25, quant.Q2_K: 0.45,
}

func openGGUF(t *testing.T, path string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			t.Skipf("%s: not present", path)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func decodeTensor(t *testing.T, f *gguf.File, ti *gguf.TensorInfo) []float32 {
	t.Helper()
	data, err := f.Data(ti)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, ti.Elements())
	if err := quant.Dequantize(ti.Type, data, out); err != nil {
		t.Fatalf("%s %s: %v", ti.Name, ti.Type, err)
	}
	return out
}

func relRMS(x, y []float32) float64 {
	var e, s float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		e += float64(d * d)
		s += float64(float64(x[i]) * float64(x[i]))
	}
	return math.Sqrt(e / s)
}

// compareFiles checks every tensor of q against its source in src.
func compareFiles(t *testing.T, srcPath, qPath string, seen map[quant.Type]bool) {
	src, q := openGGUF(t, srcPath), openGGUF(t, qPath)
	for i := range q.Tensors {
		qt := &q.Tensors[i]
		st, ok := src.Tensor(qt.Name)
		if !ok {
			t.Fatalf("%s: %s missing from %s", qPath, qt.Name, srcPath)
		}
		if qt.Type == quant.F32 || qt.Type == st.Type {
			continue
		}
		seen[qt.Type] = true
		ref := decodeTensor(t, src, st)
		got := decodeTensor(t, q, qt)
		bound, ok := rmsBound[qt.Type]
		if !ok {
			t.Fatalf("no bound for %s", qt.Type)
		}
		if rel := relRMS(ref, got); rel > bound {
			t.Errorf("%s %s (%s): relative RMS error %.4f > %.4f", filepath.Base(qPath), qt.Name, qt.Type, rel, bound)
		}

		// llama-quantize without imatrix runs the reference quantizer
		if !quant.CanQuantize(qt.Type) || qt.Type == quant.F16 {
			continue
		}
		want, _ := q.Data(qt)
		// the first rows suffice and keep the test fast
		if n := int(qt.Dims[0]); len(ref) > 64*n {
			ref = ref[:64*n]
			want = want[:quant.RowSize(qt.Type, 64*n)]
		}
		mine := make([]byte, len(want))
		if err := quant.Quantize(qt.Type, ref, mine); err != nil {
			t.Fatal(err)
		}
		l, _ := quant.LayoutOf(qt.Type)
		bad, first := 0, -1
		for b := 0; b < len(want)/l.BlockBytes; b++ {
			if string(want[b*l.BlockBytes:(b+1)*l.BlockBytes]) != string(mine[b*l.BlockBytes:(b+1)*l.BlockBytes]) {
				if bad++; first < 0 {
					first = b
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s %s (%s): Quantize differs from llama-quantize in %d of %d blocks (first %d)",
				filepath.Base(qPath), qt.Name, qt.Type, bad, len(want)/l.BlockBytes, first)
		}
	}
}

func TestSyntheticFiles(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testdata, "synthetic", "tiny256-*.gguf"))
	if len(files) == 0 {
		t.Skip("no synthetic files")
	}
	seen := map[quant.Type]bool{}
	for _, p := range files {
		if filepath.Base(p) == "tiny256-F16.gguf" {
			continue
		}
		compareFiles(t, filepath.Join(testdata, "synthetic", "tiny256-F16.gguf"), p, seen)
	}
	for _, typ := range []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_XS,
		quant.IQ4_NL, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q8_0} {
		if !seen[typ] {
			t.Errorf("no %s tensor checked", typ)
		}
	}
}

func TestStories260KFiles(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testdata, "derived", "stories260K-*.gguf"))
	if len(files) == 0 {
		t.Skip("no derived files")
	}
	seen := map[quant.Type]bool{}
	for _, p := range files {
		compareFiles(t, filepath.Join(testdata, "stories260K.gguf"), p, seen)
	}
	for _, typ := range []quant.Type{quant.F16, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q8_0} {
		if !seen[typ] {
			t.Errorf("no %s tensor checked", typ)
		}
	}
}

// TestRealVecDot runs VecDot on real rows against a float64 dot of the
// decoded row and activations.
func TestRealVecDot(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testdata, "synthetic", "tiny256-*.gguf"))
	if len(files) == 0 {
		t.Skip("no synthetic files")
	}
	for _, p := range files {
		f := openGGUF(t, p)
		ti, _ := f.Tensor("blk.0.ffn_down.weight")
		n := int(ti.Dims[0])
		data, _ := f.Data(ti)
		row := quant.RowSize(ti.Type, n)
		vt := quant.VecDotType(ti.Type)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Sin(float64(float64(i)*0.37))) * 0.7
		}
		xq := make([]byte, quant.RowSize(vt, n))
		if err := quant.QuantizeRow(vt, x, xq); err != nil {
			t.Fatal(err)
		}
		xd := make([]float32, n)
		quant.Dequantize(vt, xq, xd)
		wd := make([]float32, n)
		for r := 0; r < 8; r++ {
			w := data[r*row : (r+1)*row]
			quant.Dequantize(ti.Type, w, wd)
			var want, mag float64
			for i := range wd {
				want += float64(float64(wd[i]) * float64(xd[i]))
				mag += math.Abs(float64(wd[i]) * float64(xd[i]))
			}
			got := float64(quant.VecDot(ti.Type, n, w, xq))
			tol := 2e-6 * mag
			if vt == quant.Q8_1 {
				tol = 2e-3 * mag // the min term uses the fp16-rounded block sum s
			}
			if math.Abs(got-want) > tol {
				t.Errorf("%s row %d (%s): VecDot %g, reference %g", filepath.Base(p), r, ti.Type, got, want)
			}
		}
	}
}
