package exec

import (
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/runtime/weights"
)

// matmulWeightsMapped counts the runner's matmul weights whose bytes still
// are the source's (the file mapping) and those that are not.
func matmulWeightsMapped(t *testing.T, m *Model) (mapped, copied int) {
	t.Helper()
	for _, n := range m.Graph.Nodes {
		if n.Op != dsl.OpMatMul {
			continue
		}
		w := m.Weights[n.Weight]
		src, err := m.Src.Data(w.GGUF)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(src, w.Data) {
			t.Fatalf("%s: the runner's bytes differ from the file's", w.GGUF)
		}
		if unsafe.SliceData(src) == unsafe.SliceData(w.Data) {
			mapped++
		} else {
			copied++
		}
	}
	return mapped, copied
}

// openModel loads the model file testdata/rel, closed when t ends.
func openModel(t testing.TB, rel string) *Model {
	t.Helper()
	src, err := weights.Open(filepath.Join(testdata, rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	m, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A CPU runner copies the matmul weights out of the mapping when they fit,
// keeps them mapped with Mmap or when they do not, and computes the same
// tokens either way; the first runner's choice stands for later ones.
func TestResidentWeights(t *testing.T) {
	const rel = "synthetic/tiny256-Q4_K_M.gguf"
	prompt := []int32{1, 17, 300, 42}
	run := func(m *Model, opt Options) []int32 {
		opt.Threads, opt.Context = 2, 64
		r, err := NewRunner(m, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return greedy(t, r, prompt, 12, -1, nil)
	}

	mapped := openModel(t, rel)
	want := run(mapped, Options{Mmap: true})
	if n, c := matmulWeightsMapped(t, mapped); n == 0 || c != 0 {
		t.Fatalf("Mmap: %d weights mapped, %d copied; want all mapped", n, c)
	}
	run(mapped, Options{})
	if n, c := matmulWeightsMapped(t, mapped); n == 0 || c != 0 {
		t.Fatalf("a runner after an Mmap one: %d weights mapped, %d copied; want all still mapped", n, c)
	}

	resident := openModel(t, rel)
	got := run(resident, Options{})
	if n, c := matmulWeightsMapped(t, resident); n != 0 || c == 0 {
		t.Fatalf("default: %d weights mapped, %d copied; want all copied", n, c)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("copied weights gave %v, mapped %v", got, want)
	}
	// A second runner on the same model copies nothing more.
	first := slices.IndexFunc(resident.Graph.Nodes, func(n dsl.Node) bool { return n.Op == dsl.OpMatMul })
	w := &resident.Weights[resident.Graph.Nodes[first].Weight]
	before := w.Data
	_ = run(resident, Options{})
	if unsafe.SliceData(before) != unsafe.SliceData(w.Data) {
		t.Error("a second runner copied the weights again")
	}

	// A machine with too little free memory keeps the mapping.
	saved := availableMemory
	availableMemory = func() uint64 { return 1 << 10 }
	defer func() { availableMemory = saved }()
	small := openModel(t, rel)
	if got := run(small, Options{}); !slices.Equal(got, want) {
		t.Fatalf("low memory: %v, want %v", got, want)
	}
	if n, c := matmulWeightsMapped(t, small); n == 0 || c != 0 {
		t.Fatalf("low memory: %d weights mapped, %d copied; want all mapped", n, c)
	}
}
