package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// JIT options for cuModuleLoadDataEx (CUjit_option).
const (
	jitInfoLogBuffer       = 3
	jitInfoLogBufferBytes  = 4
	jitErrorLogBuffer      = 5
	jitErrorLogBufferBytes = 6
)

// Module is PTX compiled by the driver for this device.
type Module struct {
	m uintptr
	c *Context
}

// LoadPTX compiles PTX text. Compiler errors come back with ptxas's log.
func (c *Context) LoadPTX(ptx string) (*Module, error) {
	errLog := make([]byte, 16<<10)
	infoLog := make([]byte, 16<<10)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferBytes, jitInfoLogBuffer, jitInfoLogBufferBytes}
	// Option values are void* slots holding either a pointer or an integer.
	vals := []uintptr{
		uintptr(unsafe.Pointer(&errLog[0])), uintptr(len(errLog)),
		uintptr(unsafe.Pointer(&infoLog[0])), uintptr(len(infoLog)),
	}
	src := cString(ptx)
	defer c.enter()()
	var m uintptr
	r := api.cuModuleLoadDataEx(&m, unsafe.Pointer(src), uint32(len(opts)), &opts[0], &vals[0])
	runtime.KeepAlive(errLog)
	runtime.KeepAlive(infoLog)
	if r != 0 {
		return nil, fmt.Errorf("loading PTX: %w\n%s", r, goString(&errLog[0]))
	}
	return &Module{m, c}, nil
}

// Unload frees the module.
func (m *Module) Unload() error {
	defer m.c.enter()()
	return check("cuModuleUnload", api.cuModuleUnload(m.m))
}

// Function is a kernel entry point.
type Function struct {
	f    uintptr
	Name string
	c    *Context
	// LaunchDependent's and LaunchResident's configs, made on first use
	// and reused (no allocation a launch)
	dep, res, resDep *launchEx
}

// launchEx is a CUlaunchConfig with its attributes beside it.
type launchEx struct {
	cfg   launchConfig
	attrs [2]launchAttr
}

// newLaunchEx is a config setting each of ids to 1.
func newLaunchEx(ids ...uint32) *launchEx {
	l := &launchEx{}
	for i, id := range ids {
		l.attrs[i].id, l.attrs[i].value[0] = id, 1
	}
	l.cfg.attrs, l.cfg.numAttrs = &l.attrs[0], uint32(len(ids))
	return l
}

// Function looks up a kernel by its .entry name.
func (m *Module) Function(name string) (*Function, error) {
	defer m.c.enter()()
	var f uintptr
	if err := check("cuModuleGetFunction "+name, api.cuModuleGetFunction(&f, m.m, cString(name))); err != nil {
		return nil, err
	}
	return &Function{f: f, Name: name, c: m.c}, nil
}

// Global is the device memory of a module-scope variable, by name.
func (m *Module) Global(name string) (Buffer, error) {
	defer m.c.enter()()
	var p, n uint64
	if err := check("cuModuleGetGlobal "+name, api.cuModuleGetGlobal(&p, &n, m.m, cString(name))); err != nil {
		return Buffer{}, err
	}
	return Buffer{p, n, m.c}, nil
}

// SetMaxDynamicShared allows a launch to use up to n bytes of dynamic
// shared memory (past the 48 KiB default).
func (f *Function) SetMaxDynamicShared(n int) error {
	const attrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	defer f.c.enter()()
	return check("cuFuncSetAttribute", api.cuFuncSetAttribute(f.f, attrMaxDynamicShared, int32(n)))
}

// SetCarveout asks that the multiprocessors running f give percent of
// their unified L1 and shared memory to shared memory (the driver rounds
// to a supported split). Kernels with different splits cannot share a
// multiprocessor until it drains, which a dependent launch's early CTAs
// would otherwise wait on.
func (f *Function) SetCarveout(percent int) error {
	const attrCarveout = 9 // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
	defer f.c.enter()()
	return check("cuFuncSetAttribute", api.cuFuncSetAttribute(f.f, attrCarveout, int32(percent)))
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Args holds a launch's kernel parameters; each is a pointer to its value.
// Reuse one Args per launch site so a launch allocates nothing.
type Args struct {
	ptrs []unsafe.Pointer
	vals []uint64
}

// NewArgs makes room for n parameters of up to 8 bytes each.
func NewArgs(n int) *Args {
	a := &Args{ptrs: make([]unsafe.Pointer, n), vals: make([]uint64, n)}
	for i := range a.ptrs {
		a.ptrs[i] = unsafe.Pointer(&a.vals[i])
	}
	return a
}

// Set stores parameter i: device pointers and 64-bit ints as uint64,
// 32-bit values in the low half (little-endian, as the driver reads them).
func (a *Args) Set(i int, v uint64) { a.vals[i] = v }

// SetF32 stores a float32 parameter.
func (a *Args) SetF32(i int, v float32) { a.vals[i] = uint64(*(*uint32)(unsafe.Pointer(&v))) }

// launchConfig is CUlaunchConfig (cuda.h): the grid, the block, the
// dynamic shared memory, the stream and the launch attributes.
type launchConfig struct {
	grid, block Dim3
	shared      uint32
	stream      uintptr
	attrs       *launchAttr
	numAttrs    uint32
}

// launchAttr is CUlaunchAttribute: an id, padding, a 64-byte value union.
type launchAttr struct {
	id    uint32
	_     uint32
	value [8]uint64
}

// Launch attributes (CUlaunchAttributeID).
const (
	attrCooperative               = 2 // CU_LAUNCH_ATTRIBUTE_COOPERATIVE
	attrProgrammaticSerialization = 6 // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
)

// CanLaunchDependent reports whether the driver launches kernels early
// after the one before them (programmatic dependent launch, sm_90 on):
// it exports cuLaunchKernelEx.
func CanLaunchDependent() bool { return hot.cuLaunchKernelEx != 0 }

// LaunchDependent is Launch with programmatic stream serialization: f may
// start while the kernel before it on s still runs, up to its first
// griddepcontrol.wait, once every CTA of that kernel has executed
// griddepcontrol.launch_dependents (or exited). Captured into a graph, it
// becomes a programmatic edge.
func (f *Function) LaunchDependent(grid, block Dim3, shared uint32, s *Stream, a *Args) error {
	if f.dep == nil {
		f.dep = newLaunchEx(attrProgrammaticSerialization)
	}
	return f.launchEx(f.dep, grid, block, shared, s, a)
}

// LaunchResident launches f cooperatively: every CTA of the grid resident
// at once (at most ActiveBlocks a multiprocessor), as a kernel whose CTAs
// meet at grid barriers needs; with dependent, also as LaunchDependent.
func (f *Function) LaunchResident(grid, block Dim3, shared uint32, s *Stream, a *Args, dependent bool) error {
	l := &f.res
	if dependent {
		l = &f.resDep
	}
	if *l == nil {
		if dependent {
			*l = newLaunchEx(attrCooperative, attrProgrammaticSerialization)
		} else {
			*l = newLaunchEx(attrCooperative)
		}
	}
	return f.launchEx(*l, grid, block, shared, s, a)
}

// launchEx launches f through cuLaunchKernelEx with l's attributes.
func (f *Function) launchEx(l *launchEx, grid, block Dim3, shared uint32, s *Stream, a *Args) error {
	if hot.cuLaunchKernelEx == 0 {
		return fmt.Errorf("launching %s: %w (no cuLaunchKernelEx)", f.Name, ErrOldDriver)
	}
	cfg := &l.cfg // the driver reads it during the call only
	var params unsafe.Pointer
	cfg.stream, params = launchOperands(s, a)
	cfg.grid, cfg.block, cfg.shared = grid, block, shared
	defer f.c.enter()()
	r := ccall(hot.cuLaunchKernelEx, 4, [11]uintptr{uintptr(unsafe.Pointer(cfg)), f.f, uintptr(params)})
	runtime.KeepAlive(a)
	if r != 0 {
		return fmt.Errorf("launching %s: %w", f.Name, r)
	}
	return nil
}

// ActiveBlocks is how many CTAs of block threads using shared bytes of
// dynamic shared memory fit on one multiprocessor at once.
func (f *Function) ActiveBlocks(block, shared int) (int, error) {
	defer f.c.enter()()
	var n int32
	if err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f.f, int32(block), uint64(shared))); err != nil {
		return 0, fmt.Errorf("%s: %w", f.Name, err)
	}
	return int(n), nil
}

// launchOperands are a launch's stream handle (0: the default stream) and
// kernelParams array (nil without parameters).
func launchOperands(s *Stream, a *Args) (uintptr, unsafe.Pointer) {
	var sp uintptr
	if s != nil {
		sp = s.s
	}
	if a == nil || len(a.ptrs) == 0 {
		return sp, nil
	}
	return sp, unsafe.Pointer(&a.ptrs[0])
}

// Launch enqueues f on stream s (nil: the default stream).
func (f *Function) Launch(grid, block Dim3, shared uint32, s *Stream, a *Args) error {
	sp, params := launchOperands(s, a)
	defer f.c.enter()()
	r := ccall(hot.cuLaunchKernel, 11, [11]uintptr{f.f, uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(shared), sp, uintptr(params)})
	runtime.KeepAlive(a)
	if r != 0 {
		return fmt.Errorf("launching %s: %w", f.Name, r)
	}
	return nil
}
