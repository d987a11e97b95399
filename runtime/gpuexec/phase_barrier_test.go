package gpuexec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// passOn is b[i] = a[(i + n/2) mod n] + 1: a grid loop each of whose reads
// another CTA's store fed, so a barrier that lets a CTA through early shows
// as values left behind.
func passOn() *kernel.Kernel {
	b := kernel.New("PassOn")
	a, o := b.Buffer("a", kernel.F32), b.Buffer("b", kernel.F32)
	n := b.Let("n", o.Len())
	b.ParallelFor("i", 0, n, func(i kernel.Expr) {
		b.Store(o, i, a.At(i.Add(n.Div(2)).Rem(n)).Add(kernel.F(1)))
	})
	return b.MustBuild()
}

// What a grid barrier costs against the launch boundary it replaces: 16
// trivial phases (passOn over 64K values, back and forth between two
// buffers) as one phased launch, by barrier (ptx.Target.PhaseBarrier) and
// resident CTAs, against 16 dependent launches of the same kernel. Every
// value must come out 16 a launch: each phase read what the one before
// stored in other CTAs.
func TestGPUPhaseBarrier(t *testing.T) {
	needGPU(t)
	if !cuda.CanLaunchDependent() {
		t.Skip("the driver has no cuLaunchKernelEx: no resident or dependent launches")
	}
	c, s := deviceStream(t)
	const phases, n, reps = 16, 1 << 16, 200
	one := passOn()
	ks := make([]*kernel.Kernel, phases)
	for i := range ks {
		ks[i] = one
	}
	pk, err := kernel.Phases("Barrier16", ks...)
	if err != nil {
		t.Fatal(err)
	}
	bufs := [2]cuda.Buffer{zeroed(t, c, 4*n), zeroed(t, c, 4*n)}
	defer bufs[0].Free()
	defer bufs[1].Free()
	// check is whether every value of the buffer the last phase wrote is want
	check := func(what string, want float32) {
		got := make([]byte, 4*n)
		if err := bufs[0].Download(got); err != nil {
			t.Fatal(err)
		}
		for i, v := range f32sFrom(got) {
			if v != want {
				t.Fatalf("%s: value %d is %v, want %v (a phase ran before the one it reads)", what, i, v, want)
			}
		}
	}
	reset := func() {
		for _, b := range bufs {
			if err := b.Zero(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var table strings.Builder
	// the baseline: 16 launches, each waiting for the one before
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	tg.Dependent = func(*kernel.Kernel) bool { return true }
	mod := loadKernelsFor(t, c, tg, one)
	fn, err := mod.Function(one.Name)
	if err != nil {
		t.Fatal(err)
	}
	grid, blk, _, err := launchShape(one, tg, ptx.Elems(n), ptx.Elems(n))
	if err != nil {
		t.Fatal(err)
	}
	hops := [2]*cuda.Args{cuda.NewArgs(4), cuda.NewArgs(4)}
	for j, a := range hops { // hop j: bufs[j] -> bufs[1-j], as the phased kernel's phases go
		a.Set(0, bufs[j].Ptr)
		a.Set(1, n)
		a.Set(2, bufs[1-j].Ptr)
		a.Set(3, n)
	}
	reset()
	us := deviceMicros(t, c, s, reps, func() {
		for j := range phases {
			if err := fn.LaunchDependent(grid, blk, 0, s, hops[j%2]); err != nil {
				t.Fatal(err)
			}
		}
	})
	check("16 dependent launches", phases*reps)
	fmt.Fprintf(&table, "16 dependent launches of %d CTAs: %.1f µs, %.2f a launch\n", grid.X, us, us/phases)
	for _, barrier := range []string{"", "sleep", "count", "bare"} {
		tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
		tg.PhaseBarrier = barrier
		mod := loadKernelsFor(t, c, tg, pk)
		fn, err := mod.Function(pk.Name)
		if err != nil {
			t.Fatal(err)
		}
		fit, err := fn.ActiveBlocks(128, 0)
		if err != nil {
			t.Fatal(err)
		}
		a := cuda.NewArgs(4*phases + 2)
		for j := range phases { // phase j: bufs[0] -> bufs[1] when j is even, back when odd; the last into bufs[0]
			from, to := bufs[j%2], bufs[1-j%2]
			a.Set(4*j, from.Ptr)
			a.Set(4*j+1, n)
			a.Set(4*j+2, to.Ptr)
			a.Set(4*j+3, n)
		}
		bar := zeroed(t, c, 8)
		a.Set(4*phases, bar.Ptr)
		a.Set(4*phases+1, 2)
		for _, per := range []int{1, 2, 4, fit} {
			ctas := uint32(min(per, fit) * c.Device.Multiprocessors)
			reset()
			if err := bar.Zero(); err != nil {
				t.Fatal(err)
			}
			us := deviceMicros(t, c, s, reps, func() {
				if err := fn.LaunchResident(cuda.Dim3{X: ctas, Y: 1, Z: 1}, cuda.Dim3{X: 128, Y: 1, Z: 1}, 0, s, a, false); err != nil {
					t.Fatal(err)
				}
			})
			check(fmt.Sprintf("barrier %q, %d CTAs", barrier, ctas), phases*reps)
			fmt.Fprintf(&table, "16 phases, barrier %-7q %4d CTAs of 128: %.1f µs, %.2f a phase\n", barrier, ctas, us, us/phases)
		}
		bar.Free()
	}
	t.Logf("%s, %d SMs:\n%s", c.Device.Name, c.Device.Multiprocessors, table.String())
}

// The barrier test's kernel, interpreted: 16 phases back and forth leave
// 16 in every value of the first buffer (what TestGPUPhaseBarrier checks).
func TestPhaseBarrierKernel(t *testing.T) {
	ks := make([]*kernel.Kernel, 16)
	for i := range ks {
		ks[i] = passOn()
	}
	pk, err := kernel.Phases("Barrier16", ks...)
	if err != nil {
		t.Fatal(err)
	}
	bufs := [2][]float32{make([]float32, 64), make([]float32, 64)}
	var args []any
	for j := range ks {
		args = append(args, bufs[j%2], bufs[1-j%2])
	}
	if err := kernel.Run(pk, append(args, []uint32{0, 0})...); err != nil {
		t.Fatal(err)
	}
	for i, v := range bufs[0] {
		if v != 16 {
			t.Fatalf("value %d is %v, want 16", i, v)
		}
	}
}
