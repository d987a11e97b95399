package gosrc

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"math"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// typecheck parses and type-checks generated files as one package.
func typecheck(t *testing.T, files map[string][]byte) {
	t.Helper()
	fset := token.NewFileSet()
	var fs []*ast.File
	for name, src := range files {
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, src)
		}
		fs = append(fs, f)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("p", fset, fs, nil); err != nil {
		for name, src := range files {
			t.Logf("%s:\n%s", name, src)
		}
		t.Fatal(err)
	}
}

// Names that collide with what generated code calls are renamed; a bound
// that an accumulator feeds is evaluated once; odd constants render.
func TestRenderEdges(t *testing.T) {
	b := kernel.New("Edges")
	x, y := b.Buffer("len", kernel.F32), b.Buffer("max", kernel.F32)
	n := b.Scalar("min", kernel.Int)
	cnt := b.Acc("sel", kernel.OpAdd, kernel.I(2))
	b.For("i", 0, cnt.Get(), func(i kernel.Expr) {
		b.Fold(cnt, kernel.I(0))
		v := b.Let("math", x.At(i).Add(kernel.F(math.Inf(-1))).Max(kernel.F(math.Copysign(0, -1))))
		b.Store(y, i, kernel.Select(i.Lt(n), v, kernel.F(math.NaN())))
	})
	b.For("i", 0, 2, func(i kernel.Expr) { b.Let("dead", x.At(i)) })
	b.Barrier()
	k := b.MustBuild()
	files, err := Files("p", map[string][]*kernel.Kernel{"edges": {k}})
	if err != nil {
		t.Fatal(err)
	}
	typecheck(t, files)
	src := string(files["zz_edges.go"])
	for _, want := range []string{"func Edges(len2 []float32, max2 []float32, min2 int)", "i, iEnd := 0, sel2",
		"math.Inf(-1)", "math.Copysign(0, -1)", "math.NaN()", "sel(i < min2"} {
		if !strings.Contains(src, want) {
			t.Errorf("missing %q in\n%s", want, src)
		}
	}
	if strings.Contains(src, "dead") {
		t.Errorf("unused let rendered:\n%s", src)
	}
	if !strings.Contains(string(files["zz_rt.go"]), "func sel[") {
		t.Error("sel helper not emitted")
	}
}

// The Go rules turn a Lanes hint into unrolled copies.
func TestLanesUnroll(t *testing.T) {
	b := kernel.New("Lanes")
	x := b.Buffer("x", kernel.F32)
	b.For("i", 0, 8, func(i kernel.Expr) { b.Store(x, i, x.At(i).Mul(2)) })
	b.Schedule("i", kernel.LoopSchedule{Lanes: 4})
	src, _, _, err := Func(b.MustBuild(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(src, "i += 4") || !strings.Contains(strings.ReplaceAll(src, " ", ""), "x[i+3]") {
		t.Errorf("lanes not unrolled:\n%s", src)
	}
	src, _, _, _ = Func(b.MustBuild(), kernel.Schedule{"i": {}})
	if strings.Contains(src, "i += 4") {
		t.Errorf("override ignored:\n%s", src)
	}
}

// F32ToF16 renders as a call of the emitted f32tof16 helper.
func TestF32ToF16Helper(t *testing.T) {
	b := kernel.New("Half")
	x, y := b.Buffer("x", kernel.F32), b.Buffer("y", kernel.U16)
	b.For("i", 0, x.Len(), func(i kernel.Expr) { b.Store(y, i, x.At(i).F32ToF16()) })
	files, err := Files("p", map[string][]*kernel.Kernel{"half": {b.MustBuild()}})
	if err != nil {
		t.Fatal(err)
	}
	typecheck(t, files)
	if !strings.Contains(string(files["zz_half.go"]), "f32tof16(") || !strings.Contains(string(files["zz_rt.go"]), "func f32tof16(") {
		t.Errorf("f32tof16 not rendered:\n%s\n%s", files["zz_half.go"], files["zz_rt.go"])
	}
}

// F32Bits renders as math.Float32bits of the f32 operand.
func TestF32BitsRenders(t *testing.T) {
	b := kernel.New("Bits")
	x, y := b.Buffer("x", kernel.F32), b.Buffer("y", kernel.U32)
	b.For("i", 0, x.Len(), func(i kernel.Expr) { b.Store(y, i, x.At(i).Mul(2).F32Bits().Shr(16)) })
	files, err := Files("p", map[string][]*kernel.Kernel{"bits": {b.MustBuild()}})
	if err != nil {
		t.Fatal(err)
	}
	typecheck(t, files)
	if src := string(files["zz_bits.go"]); !strings.Contains(src, "math.Float32bits(") {
		t.Errorf("math.Float32bits not rendered:\n%s", src)
	}
}
