package gpuexec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// ReadStream's loop reads whole 16-byte chunks, four a trip: a stream of
// narrower loads would measure the load issue, not the memory.
func TestReadStreamRendersVectorLoads(t *testing.T) {
	src, err := ptx.Module([]*kernel.Kernel{ops.ReadStream()}, ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	if v4, narrow := strings.Count(src, "ld.global.v4.u32"), strings.Count(src, "ld.global.u32"); v4 < 4 || narrow > 0 {
		t.Fatalf("ReadStream: %d 16-byte loads (want 4 or more: the unrolled trip and the rest) and %d 4-byte ones (want 0)", v4, narrow)
	}
}

// The measured read bandwidth is positive and under the device's
// theoretical peak.
func TestGPUReadBandwidth(t *testing.T) {
	needGPU(t)
	c, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bw, err := ReadBandwidth(c)
	if err != nil {
		t.Fatal(err)
	}
	peak := c.Device.PeakBandwidth()
	t.Logf("%s: read %.1f GB/s, %.0f%% of the %.1f GB/s peak", c.Device.Name, bw/1e9, 100*bw/peak, peak/1e9)
	if bw <= 0 || (peak > 0 && bw > 1.02*peak) {
		t.Fatalf("read bandwidth %.1f GB/s against a peak of %.1f", bw/1e9, peak/1e9)
	}
}

// readPool is a zeroed 1 GiB device buffer that the read tests stream
// from, a new offset each launch (a matrix read again from the 50 MB L2
// would time the cache).
const readPool = 1 << 30

func newReadPool(t *testing.T, c *cuda.Context) cuda.Buffer {
	t.Helper()
	pd, err := c.Alloc(readPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Free() })
	if err := pd.Zero(); err != nil {
		t.Fatal(err)
	}
	return pd
}

// readRate is the GB/s of ops.ReadStream k (launched by launch, shaped
// by tg) summing size bytes of pool in pieces of piece: 50 launches back
// to back after 5, each at the next offset of the pool.
func readRate(t *testing.T, c *cuda.Context, s *cuda.Stream, pool cuda.Buffer, k *kernel.Kernel, tg ptx.Target,
	launch func(grid, block cuda.Dim3, shared uint32, a *cuda.Args) error, size, piece int) float64 {
	t.Helper()
	n := size / piece
	y, err := c.Alloc(4 * uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	grid, block, shared, err := launchShape(k, tg, ptx.Elems(n*piece), ptx.Elems(n))
	if err != nil {
		t.Fatal(err)
	}
	a := cuda.NewArgs(4)
	a.Set(1, uint64(n*piece))
	a.Set(2, y.Ptr)
	a.Set(3, uint64(n))
	slots, i := readPool/(n*piece), 0
	next := func() { // the launch copies its arguments, so one Args serves every offset
		a.Set(0, pool.Ptr+uint64(i%slots*n*piece))
		i++
		if err := launch(grid, block, shared, a); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		next()
	}
	return float64(n*piece) / deviceMicros(t, c, s, 50, next) / 1e3
}

// decodeReadSizes are the 8B's decode matrices' bytes (Q4_K 4096×4096,
// 14336×4096, Q6_K 4096×14336, the SwiGLU's two 14336×4096) and 2 MiB.
var decodeReadSizes = []int{2 << 20, 9437184, 33030144, 48168960, 66060288}

// TestGPUReadCeiling times ops.ReadStream over reads the size of the 8B's
// decode matrices (one launch a matrix, back to back, each at a new offset
// of a 1 GiB pool, as a decode step streams them), in pieces of several
// sizes: the rate one launch of that size can reach, against which its
// mat-vec is held (a launch's ramp and tail are part of it).
func TestGPUReadCeiling(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	pool := newReadPool(t, c)
	k := ops.ReadStream()
	mod, tg := loadKernels(t, c, k)
	fn, err := mod.Function(k.Name)
	if err != nil {
		t.Fatal(err)
	}
	launch := func(grid, block cuda.Dim3, shared uint32, a *cuda.Args) error {
		return fn.Launch(grid, block, shared, s, a)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%10s |", "bytes")
	pieces := []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}
	for _, p := range pieces {
		fmt.Fprintf(&table, " %8s", fmt.Sprintf("%dK", p>>10))
	}
	table.WriteString("   (GB/s)\n")
	for _, size := range append(decodeReadSizes, 256<<20) {
		fmt.Fprintf(&table, "%10d |", size)
		for _, p := range pieces {
			fmt.Fprintf(&table, " %8.0f", readRate(t, c, s, pool, k, tg, launch, size, p))
		}
		table.WriteString("\n")
	}
	t.Logf("ReadStream a launch, back to back:\n%s", table.String())
}

// TestGPUReadChain times ops.ReadStream launched as a decode step launches
// its mat-vecs, a chain over reads the size of the 8B's matrices: plain
// launches; dependent launches waiting for the kernel before at entry (as
// the mat-vecs do); and dependent launches whose wait comes only before
// their store, so each kernel's reads start while the one before finishes
// (the rendered wait moved by hand: what a mat-vec that issued its weight
// loads before its wait could reach). The gap between the last two is what
// streaming across launches is worth.
func TestGPUReadChain(t *testing.T) {
	needGPU(t)
	if !cuda.CanLaunchDependent() {
		t.Skip("the driver has no cuLaunchKernelEx: no dependent launches to time")
	}
	c, s := deviceStream(t)
	pool := newReadPool(t, c)
	k := ops.ReadStream()
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	dep := tg
	dep.Dependent = func(*kernel.Kernel) bool { return true }
	entry, err := ptx.Module([]*kernel.Kernel{k}, dep)
	if err != nil {
		t.Fatal(err)
	}
	const wait = "\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n"
	store := strings.Index(entry, "\tst.global")
	if strings.Count(entry, wait) != 1 || store < strings.Index(entry, wait) {
		t.Fatalf("ReadStream rendered for dependent launch: no single wait before its store:\n%s", entry)
	}
	late := strings.Replace(entry, wait, "", 1)
	store = strings.Index(late, "\tst.global")
	late = late[:store] + wait + late[store:]
	type variant struct {
		name      string
		fn        *cuda.Function
		dependent bool
	}
	var variants []variant
	for _, v := range []struct {
		name, src string
		dependent bool
	}{{"plain", "", false}, {"wait at entry", entry, true}, {"wait before the store", late, true}} {
		var mod *cuda.Module
		if v.src == "" {
			mod = loadKernelsFor(t, c, tg, k)
		} else {
			if mod, err = c.LoadPTX(v.src); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mod.Unload() })
		}
		fn, err := mod.Function(k.Name)
		if err != nil {
			t.Fatal(err)
		}
		variants = append(variants, variant{v.name, fn, v.dependent})
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%10s |", "bytes")
	for _, v := range variants {
		fmt.Fprintf(&table, " %22s", v.name)
	}
	table.WriteString("   (GB/s, 16 KiB pieces)\n")
	for _, size := range decodeReadSizes {
		fmt.Fprintf(&table, "%10d |", size)
		for _, v := range variants {
			launch := func(grid, block cuda.Dim3, shared uint32, a *cuda.Args) error {
				if v.dependent {
					return v.fn.LaunchDependent(grid, block, shared, s, a)
				}
				return v.fn.Launch(grid, block, shared, s, a)
			}
			fmt.Fprintf(&table, " %22.0f", readRate(t, c, s, pool, k, tg, launch, size, 16<<10))
		}
		table.WriteString("\n")
	}
	t.Logf("ReadStream launches in a chain:\n%s", table.String())
}
