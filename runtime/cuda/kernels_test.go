package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
)

// The kernels of kernels/ops rendered by dsl/kernel/ptx, run on the device
// and compared with the interpreter on the same arguments.

// opsKernels is every kernel of kernels/ops that stores its outputs (PTX
// entries return nothing, so those with a Result are the Go target's).
func opsKernels() []*kernel.Kernel {
	groups := ops.Groups()
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	var ks []*kernel.Kernel
	for _, g := range names {
		for _, k := range groups[g] {
			if k.Result == nil {
				ks = append(ks, k)
			}
		}
	}
	return ks
}

func bufBytes(a any) ([]byte, bool) {
	switch x := a.(type) {
	case []byte:
		return x, true
	case []float32:
		b := make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b, true
	case []uint16:
		b := make([]byte, 2*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint16(b[2*i:], v)
		}
		return b, true
	case []int32:
		b := make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		}
		return b, true
	}
	return nil, false
}

func setBuf(a any, b []byte) {
	switch x := a.(type) {
	case []byte:
		copy(x, b)
	case []float32:
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case []uint16:
		for i := range x {
			x[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
	case []int32:
		for i := range x {
			x[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
}

// gpuKernel is one rendered, loaded kernel.
type gpuKernel struct {
	k  *kernel.Kernel
	t  ptx.Target
	m  *Module
	fn *Function
}

func loadKernel(t *testing.T, c *Context, k *kernel.Kernel) *gpuKernel {
	t.Helper()
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	src, err := ptx.Render(k, tg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.LoadPTX(src)
	if err != nil {
		t.Fatalf("%s: %v", k.Name, err)
	}
	t.Cleanup(func() { m.Unload() })
	f, err := m.Function(k.Name)
	if err != nil {
		t.Fatal(err)
	}
	return &gpuKernel{k, tg, m, f}
}

// run runs the kernel on args (kernel.Run's form), writing results back
// into the slices. block is the CTA size; blocks 0 means enough for one
// thread per grid-loop iteration.
func (g *gpuKernel) run(c *Context, block, blocks int, args ...any) error {
	a := NewArgs(2 * len(args))
	slot := 0
	var bufs []Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	for i, p := range g.k.Params {
		if p.Buf != nil {
			host, ok := bufBytes(args[i])
			if !ok {
				return fmt.Errorf("buffer %s: %T", p.Buf.Name, args[i])
			}
			d, err := c.Alloc(uint64(max(len(host), 4)))
			if err != nil {
				return err
			}
			bufs = append(bufs, d)
			if err := d.Upload(host); err != nil {
				return err
			}
			n := len(host) / p.Buf.Elem.Bytes()
			a.Set(slot, d.Ptr)
			a.Set(slot+1, uint64(n))
			slot += 2
			continue
		}
		switch x := args[i].(type) {
		case int:
			a.Set(slot, uint64(int64(x)))
		case int32:
			a.Set(slot, uint64(uint32(x)))
		case float32:
			a.SetF32(slot, x)
		default:
			return fmt.Errorf("scalar %s: %T", p.Var.Name, x)
		}
		slot++
	}
	if blocks == 0 {
		n, err := ptx.Threads(g.k, g.t, args...)
		if err != nil {
			return err
		}
		blocks = (n + block - 1) / block
	}
	if err := g.fn.Launch(Dim3{uint32(blocks), 1, 1}, Dim3{uint32(block), 1, 1}, 0, nil, a); err != nil {
		return err
	}
	if err := c.Synchronize(); err != nil {
		return err
	}
	j := 0
	for i, p := range g.k.Params {
		if p.Buf == nil {
			continue
		}
		host, _ := bufBytes(args[i])
		if err := bufs[j].Download(host); err != nil {
			return err
		}
		setBuf(args[i], host)
		j++
	}
	return nil
}

func clone(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch x := a.(type) {
		case []byte:
			out[i] = append([]byte(nil), x...)
		case []float32:
			out[i] = append([]float32(nil), x...)
		case []uint16:
			out[i] = append([]uint16(nil), x...)
		case []int32:
			out[i] = append([]int32(nil), x...)
		default:
			out[i] = a
		}
	}
	return out
}

// ulpBound is how far each kernel may be from the interpreter, in f32 ulps:
// 0 (bit-exact) except where an exp, sin, cos or pow is rounded from f64
// sequences that can differ from Go's by an f64 ulp (docs/ptx.md).
func ulpBound(name string) int32 {
	switch name {
	case "Softmax", "RopeNormal", "RopeNeox":
		return 1
	}
	return 0
}

func ulpDiff(a, b float32) int32 {
	ia, ib := int32(math.Float32bits(a)), int32(math.Float32bits(b))
	if ia < 0 {
		ia = math.MinInt32 - ia
	}
	if ib < 0 {
		ib = math.MinInt32 - ib
	}
	d := ia - ib
	if d < 0 {
		d = -d
	}
	return d
}

// compare checks every buffer (inputs too: the kernel must not write them).
func compare(t *testing.T, what string, got, want []any, bound int32) {
	t.Helper()
	for i := range want {
		switch w := want[i].(type) {
		case []byte:
			g := got[i].([]byte)
			for j := range w {
				if g[j] != w[j] {
					t.Fatalf("%s: arg %d byte %d = %d, want %d", what, i, j, g[j], w[j])
				}
			}
		case []uint16, []int32:
			gb, _ := bufBytes(got[i])
			wb, _ := bufBytes(w)
			for j := range wb {
				if gb[j] != wb[j] {
					t.Fatalf("%s: arg %d byte %d = %d, want %d", what, i, j, gb[j], wb[j])
				}
			}
		case []float32:
			g := got[i].([]float32)
			worst := int32(0)
			for j := range w {
				d := ulpDiff(g[j], w[j])
				if bound == 0 && math.Float32bits(g[j]) != math.Float32bits(w[j]) {
					d = max(d, 1) // bit-exact means -0 is not +0 either
				}
				if w[j] != w[j] && g[j] != g[j] {
					d = 0
				}
				if d > bound {
					t.Fatalf("%s: arg %d [%d] = %v (%#x), interpreter %v (%#x): %d ulp > %d", what, i, j,
						g[j], math.Float32bits(g[j]), w[j], math.Float32bits(w[j]), d, bound)
				}
				worst = max(worst, d)
			}
			if worst > 0 {
				t.Logf("%s: arg %d within %d ulp", what, i, worst)
			}
		}
	}
}

// bigArgs are larger cases than opstest's: several CTAs of rows or heads.
func bigArgs(k *kernel.Kernel, r *rand.Rand) []any {
	for _, d := range ops.Blocks() {
		if k.Name == "MatVec"+d.Name {
			rows, cols := 1000, 1024
			return []any{opstest.Blocks(d, rows*cols/d.QK, r), opstest.Floats(cols, 1, r), make([]float32, rows)}
		}
		if k.Name == "Dequant"+d.Name {
			return []any{opstest.Blocks(d, 40, r), make([]float32, 40*d.QK)}
		}
	}
	switch k.Name {
	case "RopeNormal", "RopeNeox":
		x := opstest.Floats(300*128, 2, r)
		return []any{x, make([]float32, len(x)), 4321, 128, 128, float32(10000), float32(1)}
	case "Softmax":
		return []any{opstest.Floats(5000, 30, r), make([]float32, 5000)}
	case "RMSNorm":
		return []any{opstest.Floats(4096, 3, r), opstest.Floats(4096, 1, r), make([]float32, 4096), float32(1e-5)}
	}
	return nil
}

func TestOpsKernelsMatchInterpreter(t *testing.T) {
	c := needGPU(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, k := range opsKernels() {
		t.Run(k.Name, func(t *testing.T) {
			g := loadKernel(t, c, k)
			if opstest.Args(k.Name, 1) == nil {
				t.Fatalf("no opstest arguments for %s", k.Name)
			}
			cases := [][]any{opstest.Args(k.Name, 1), opstest.Args(k.Name, 2), opstest.Args(k.Name, 3)}
			if b := bigArgs(k, r); b != nil {
				cases = append(cases, b)
			}
			for ci, args := range cases {
				want := clone(args)
				if err := kernel.Run(k, want...); err != nil {
					t.Fatal(err)
				}
				// one thread per iteration, then a single small CTA that
				// grid-strides over them all
				for _, shape := range [][2]int{{128, 0}, {32, 1}} {
					got := clone(args)
					if err := g.run(c, shape[0], shape[1], got...); err != nil {
						t.Fatal(err)
					}
					compare(t, fmt.Sprintf("%s case %d, %d×%d", k.Name, ci, shape[1], shape[0]), got, want, ulpBound(k.Name))
				}
			}
		})
	}
}

// Every kernel in one module compiles (ptxas's log on failure).
func TestOpsModuleLoads(t *testing.T) {
	c := needGPU(t)
	src, err := ptx.Module(opsKernels(), ptx.ForDevice(c.Device.Major, c.Device.Minor))
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.LoadPTX(src)
	if err != nil {
		t.Fatal(err)
	}
	m.Unload()
}

// Where the naive schedule (a thread per row, serial over the row) stands:
// a 4096×4096 Q4_K mat-vec, timed with events.
func TestMatVecQ4_KBandwidth(t *testing.T) {
	c := needGPU(t)
	k := ops.MatVec(ops.Q4_K)
	g := loadKernel(t, c, k)
	const rows, cols = 4096, 4096
	r := rand.New(rand.NewPCG(5, 6))
	w := opstest.Blocks(ops.Q4_K, rows*cols/256, r)
	x := opstest.Floats(cols, 1, r)
	y := make([]float32, rows)

	// correctness on the first 64 rows against the interpreter
	rowBytes := cols / 256 * 144
	want := make([]float32, 64)
	if err := kernel.Run(k, w[:64*rowBytes], x, want); err != nil {
		t.Fatal(err)
	}
	dw, _ := c.Alloc(uint64(len(w)))
	dx, _ := c.Alloc(4 * cols)
	dy, _ := c.Alloc(4 * rows)
	defer dw.Free()
	defer dx.Free()
	defer dy.Free()
	xb, _ := bufBytes(x)
	if err := dw.Upload(w); err != nil {
		t.Fatal(err)
	}
	if err := dx.Upload(xb); err != nil {
		t.Fatal(err)
	}
	a := NewArgs(6)
	a.Set(0, dw.Ptr)
	a.Set(1, uint64(len(w)))
	a.Set(2, dx.Ptr)
	a.Set(3, cols)
	a.Set(4, dy.Ptr)
	a.Set(5, rows)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	for _, block := range []int{32, 64, 128, 256} {
		grid, blk := Dim3{uint32(rows / block), 1, 1}, Dim3{uint32(block), 1, 1}
		for i := 0; i < 3; i++ { // warm up
			if err := g.fn.Launch(grid, blk, 0, s, a); err != nil {
				t.Fatal(err)
			}
		}
		start, _ := c.NewEvent()
		end, _ := c.NewEvent()
		const reps = 20
		start.Record(s)
		for i := 0; i < reps; i++ {
			g.fn.Launch(grid, blk, 0, s, a)
		}
		end.Record(s)
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		ms, _ := end.Since(start)
		start.Destroy()
		end.Destroy()
		per := float64(ms) / reps / 1e3
		gbs := float64(len(w)) / per / 1e9
		t.Logf("MatVecQ4_K %d×%d, %d threads/CTA: %.1f µs, %.1f GB/s of weights (peak %.0f GB/s)",
			rows, cols, block, per*1e6, gbs, c.Device.PeakBandwidth()/1e9)
	}
	yb := make([]byte, 4*rows)
	if err := dy.Download(yb); err != nil {
		t.Fatal(err)
	}
	setBuf(y, yb)
	for i := range want {
		if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
			t.Fatalf("row %d: %v, interpreter %v", i, y[i], want[i])
		}
	}
}

// divPow2Kernel divides and takes remainders of int32 inputs, converted to
// each integer kind, by constant powers of two (the renderer's shift form)
// and by a non-power of two (the div instruction), storing every result's
// low and high words.
func divPow2Kernel() (*kernel.Kernel, int) {
	b := kernel.New("DivPow2")
	in, out := b.Buffer("in", kernel.U8), b.Buffer("out", kernel.U8)
	type form struct {
		k  kernel.Kind
		cs []int
	}
	forms := []form{
		{kernel.Int, []int{1, 2, 8, 256, 1 << 20, 1 << 40, 12}},
		{kernel.I32, []int{1, 2, 8, 256, 1 << 20, 1 << 30, 12}},
		{kernel.U32, []int{1, 2, 8, 256, 1 << 20, 1 << 31, 12}},
		{kernel.U8, []int{1, 2, 8, 128, 12}},
		{kernel.I8, []int{1, 2, 8, 64, 12}},
	}
	n := 0
	for _, f := range forms {
		n += 4 * len(f.cs) // div and rem, two words each
	}
	b.ParallelFor("i", 0, in.Len().Div(4), func(i kernel.Expr) {
		x := b.Let("x", in.U32(i.Mul(4)).Cvt(kernel.I32))
		o := 0
		word := func(v kernel.Expr) {
			for c := 0; c < 4; c++ {
				b.Store(out, i.Mul(4*n).Add(4*o+c), v.Shr(8*c).And(0xff).Cvt(kernel.U8))
			}
			o++
		}
		for _, f := range forms {
			v := b.Let("v", x.Cvt(f.k).Cvt(f.k))
			for _, c := range f.cs {
				for _, r := range []kernel.Expr{v.Div(kernel.Const(f.k, c)), v.Rem(kernel.Const(f.k, c))} {
					w := r.Cvt(kernel.Int)
					word(w.Cvt(kernel.U32))
					word(w.Shr(32).Cvt(kernel.U32))
				}
			}
		}
	})
	return b.MustBuild(), 4 * n
}

// Integer division and remainder by constants on the device equal the
// interpreter's (Go's truncating semantics) on edge values of every kind.
func TestIntDivByConstantsMatchInterpreter(t *testing.T) {
	c := needGPU(t)
	k, per := divPow2Kernel()
	g := loadKernel(t, c, k)
	vals := []int64{0, 1, -1, 2, -2, 7, -7, 8, -8, 9, -9, 127, -128, 255, 256, -255, -256, 1<<20 + 3, -(1<<20 + 3),
		math.MaxInt32, math.MinInt32, math.MinInt32 + 1, 1 << 30, -(1 << 30)}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		vals = append(vals, int64(int32(r.Uint32())))
	}
	in := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(v))
	}
	want := []any{in, make([]byte, per*len(vals))}
	if err := kernel.Run(k, want...); err != nil {
		t.Fatal(err)
	}
	got := clone(want)
	clear(got[1].([]byte))
	if err := g.run(c, 128, 0, got...); err != nil {
		t.Fatal(err)
	}
	compare(t, "DivPow2", got, want, 0)
}
