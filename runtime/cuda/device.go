package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Device attributes (CUdevice_attribute) jitllm reads.
const (
	attrMaxThreadsPerBlock = 1
	attrMaxSharedPerBlock  = 8
	attrWarpSize           = 10
	attrClockRate          = 13
	attrMultiprocessors    = 16
	attrMemoryClockRate    = 36
	attrMemoryBusWidth     = 37
	attrL2Cache            = 38
	attrComputeMajor       = 75
	attrComputeMinor       = 76
	attrMaxSharedOptin     = 97
)

// Info describes one GPU.
type Info struct {
	Ordinal         int
	Name            string
	Major, Minor    int // compute capability
	Multiprocessors int
	TotalMemory     uint64
	SharedPerBlock  int // opt-in maximum, bytes
	L2Cache         int // bytes
	MemBusWidth     int // bits
	MemClockKHz     int
}

// PeakBandwidth is the theoretical DRAM bandwidth in bytes/s (DDR: two
// transfers per clock).
func (i Info) PeakBandwidth() float64 {
	return 2 * float64(i.MemClockKHz) * 1e3 * float64(i.MemBusWidth) / 8
}

// Devices lists the GPUs the driver sees.
func Devices() ([]Info, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	var n int32
	if err := check("cuDeviceGetCount", api.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	out := make([]Info, 0, n)
	for i := int32(0); i < n; i++ {
		var d int32
		if err := check("cuDeviceGet", api.cuDeviceGet(&d, i)); err != nil {
			return nil, err
		}
		var name [256]byte
		if err := check("cuDeviceGetName", api.cuDeviceGetName(&name[0], int32(len(name)), d)); err != nil {
			return nil, err
		}
		attr := func(a int32) int {
			var v int32
			api.cuDeviceGetAttribute(&v, a, d)
			return int(v)
		}
		var total uint64
		api.cuDeviceTotalMem(&total, d)
		out = append(out, Info{
			Ordinal: int(i), Name: goString(&name[0]),
			Major: attr(attrComputeMajor), Minor: attr(attrComputeMinor),
			Multiprocessors: attr(attrMultiprocessors), TotalMemory: total,
			SharedPerBlock: attr(attrMaxSharedOptin), L2Cache: attr(attrL2Cache),
			MemBusWidth: attr(attrMemoryBusWidth), MemClockKHz: attr(attrMemoryClockRate),
		})
	}
	return out, nil
}

// Context is the primary context of one device. The driver keeps the
// current context per OS thread and Go moves goroutines between threads, so
// every call that needs the context pins its goroutine and makes the context
// current first (enter); that is cheap next to any driver call.
type Context struct {
	Device Info
	ctx    uintptr
}

// enter pins the goroutine to its thread and makes c current; call the
// returned function when the driver call is done.
func (c *Context) enter() func() {
	runtime.LockOSThread()
	ccall(hot.cuCtxSetCurrent, 1, [11]uintptr{c.ctx})
	return runtime.UnlockOSThread
}

// Open retains device ordinal's primary context.
func Open(ordinal int) (*Context, error) {
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(devs) {
		return nil, fmt.Errorf("no CUDA device %d (found %d)", ordinal, len(devs))
	}
	c := &Context{Device: devs[ordinal]}
	if err := check("cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain(&c.ctx, int32(ordinal))); err != nil {
		return nil, err
	}
	return c, nil
}

// Close releases the primary context.
func (c *Context) Close() error {
	defer c.enter()()
	return check("cuDevicePrimaryCtxRelease", api.cuDevicePrimaryCtxRelease(int32(c.Device.Ordinal)))
}

// Synchronize waits for all work in the context.
func (c *Context) Synchronize() error {
	defer c.enter()()
	return check("cuCtxSynchronize", api.cuCtxSynchronize())
}

// MemInfo returns free and total device memory.
func (c *Context) MemInfo() (free, total uint64, err error) {
	defer c.enter()()
	err = check("cuMemGetInfo", api.cuMemGetInfo(&free, &total))
	return
}

// Buffer is device memory (plain cuMemAlloc; never managed memory).
type Buffer struct {
	Ptr  uint64
	Size uint64
	c    *Context
}

// Alloc allocates n bytes of device memory.
func (c *Context) Alloc(n uint64) (Buffer, error) {
	defer c.enter()()
	var p uint64
	if err := check(fmt.Sprintf("cuMemAlloc(%d bytes)", n), api.cuMemAlloc(&p, n)); err != nil {
		return Buffer{}, err
	}
	return Buffer{p, n, c}, nil
}

// Free releases a buffer.
func (b Buffer) Free() error {
	defer b.c.enter()()
	return check("cuMemFree", api.cuMemFree(b.Ptr))
}

// Slice is bytes [off, off+n) of b, clipped to b (freeing it frees nothing
// of its own: free b).
func (b Buffer) Slice(off, n uint64) Buffer {
	off = min(off, b.Size)
	return Buffer{b.Ptr + off, min(n, b.Size-off), b.c}
}

// Upload copies host bytes to the start of b and returns once they are
// there. cuMemcpyHtoD alone returns when a pageable source is staged, its
// DMA still in flight on the legacy stream, which our streams (created
// non-blocking) do not wait for: a kernel queued next could read the old
// bytes or have its output overwritten, so the context is synchronized.
func (b Buffer) Upload(src []byte) error {
	if uint64(len(src)) > b.Size {
		return fmt.Errorf("upload of %d bytes into a %d-byte buffer", len(src), b.Size)
	}
	if len(src) == 0 {
		return nil
	}
	defer b.c.enter()()
	if err := check("cuMemcpyHtoD", api.cuMemcpyHtoD(b.Ptr, unsafe.Pointer(&src[0]), uint64(len(src)))); err != nil {
		return err
	}
	return check("cuCtxSynchronize", api.cuCtxSynchronize())
}

// Download copies the start of b to host bytes.
func (b Buffer) Download(dst []byte) error {
	if uint64(len(dst)) > b.Size {
		return fmt.Errorf("download of %d bytes from a %d-byte buffer", len(dst), b.Size)
	}
	if len(dst) == 0 {
		return nil
	}
	defer b.c.enter()()
	return check("cuMemcpyDtoH", api.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), b.Ptr, uint64(len(dst))))
}

// UploadAsync copies host bytes to the start of b in stream order: work
// queued on s after it sees them. From pageable memory (a Go slice) the
// driver stages the bytes before it returns, so src may change afterwards;
// from a HostBuffer the copy reads them when it runs, so src must not
// change until the stream passes it.
func (b Buffer) UploadAsync(src []byte, s *Stream) error {
	if uint64(len(src)) > b.Size {
		return fmt.Errorf("upload of %d bytes into a %d-byte buffer", len(src), b.Size)
	}
	if len(src) == 0 {
		return nil
	}
	defer b.c.enter()()
	r := ccall(hot.cuMemcpyHtoDAsync, 4, [11]uintptr{uintptr(b.Ptr), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s.s})
	runtime.KeepAlive(src)
	return check("cuMemcpyHtoDAsync", r)
}

// DownloadAsync copies the start of b to host bytes in stream order, after
// the work queued on s; into pageable memory (a Go slice) it returns once
// the copy is done, into a HostBuffer at once (synchronize s before
// reading dst).
func (b Buffer) DownloadAsync(dst []byte, s *Stream) error {
	if uint64(len(dst)) > b.Size {
		return fmt.Errorf("download of %d bytes from a %d-byte buffer", len(dst), b.Size)
	}
	if len(dst) == 0 {
		return nil
	}
	defer b.c.enter()()
	r := ccall(hot.cuMemcpyDtoHAsync, 4, [11]uintptr{uintptr(unsafe.Pointer(&dst[0])), uintptr(b.Ptr), uintptr(len(dst)), s.s})
	runtime.KeepAlive(dst)
	return check("cuMemcpyDtoHAsync", r)
}

// Zero sets the buffer to zero bytes and returns once it is done
// (cuMemsetD8 is asynchronous to the host and, on the legacy stream,
// unordered with our non-blocking streams: see Upload).
func (b Buffer) Zero() error {
	defer b.c.enter()()
	if err := check("cuMemsetD8", api.cuMemsetD8(b.Ptr, 0, b.Size)); err != nil {
		return err
	}
	return check("cuCtxSynchronize", api.cuCtxSynchronize())
}

// CopyAsync copies n bytes from the start of src to the start of b in the
// order of s, a stream of either buffer's context: within one context a
// device-to-device copy, between two (two GPUs) a peer copy, direct over
// NVLink or PCIe where EnablePeerAccess turned it on, else staged by the
// driver.
func (b Buffer) CopyAsync(src Buffer, n uint64, s *Stream) error {
	switch {
	case n > b.Size || n > src.Size:
		return fmt.Errorf("copy of %d bytes from a %d-byte buffer into a %d-byte one", n, src.Size, b.Size)
	case n == 0:
		return nil
	}
	defer s.c.enter()()
	if b.c.ctx == src.c.ctx {
		return check("cuMemcpyDtoDAsync", ccall(hot.cuMemcpyDtoDAsync, 4, [11]uintptr{uintptr(b.Ptr), uintptr(src.Ptr), uintptr(n), s.s}))
	}
	return check("cuMemcpyPeerAsync", ccall(hot.cuMemcpyPeerAsync, 6, [11]uintptr{uintptr(b.Ptr), b.c.ctx, uintptr(src.Ptr), src.c.ctx, uintptr(n), s.s}))
}

// EnablePeerAccess lets c read and write peer's memory directly where the
// two devices can (NVLink or PCIe peer-to-peer), and says whether they
// can; copies between contexts work either way (CopyAsync). The same
// device, or access already on, is true.
func (c *Context) EnablePeerAccess(peer *Context) (bool, error) {
	if c.ctx == peer.ctx {
		return true, nil
	}
	var can int32
	if err := check("cuDeviceCanAccessPeer", api.cuDeviceCanAccessPeer(&can, int32(c.Device.Ordinal), int32(peer.Device.Ordinal))); err != nil {
		return false, err
	}
	if can == 0 {
		return false, nil
	}
	defer c.enter()()
	const alreadyEnabled = 704 // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
	if r := api.cuCtxEnablePeerAccess(peer.ctx, 0); r != 0 && r != alreadyEnabled {
		return false, check("cuCtxEnablePeerAccess", r)
	}
	return true, nil
}

// HostBuffer is page-locked host memory (cuMemAllocHost): the device copies
// to and from it by DMA, without the staging a pageable Go slice needs, and
// an async copy into it returns at once (wait on the stream before reading).
type HostBuffer struct {
	p unsafe.Pointer
	n uint64
	c *Context
}

// maxHostAlloc bounds one page-locked allocation: pinned memory cannot be
// swapped, so a caller's size must not take the host's memory.
const maxHostAlloc = 1 << 32

// AllocHost allocates n bytes (1 ≤ n ≤ 4 GiB) of page-locked host memory.
func (c *Context) AllocHost(n uint64) (*HostBuffer, error) {
	if n == 0 || n > maxHostAlloc {
		return nil, fmt.Errorf("page-locked allocation of %d bytes (1 to %d)", n, uint64(maxHostAlloc))
	}
	defer c.enter()()
	var p unsafe.Pointer
	if err := check(fmt.Sprintf("cuMemAllocHost(%d bytes)", n), api.cuMemAllocHost(&p, n)); err != nil {
		return nil, err
	}
	return &HostBuffer{p, n, c}, nil
}

// Bytes is the buffer's memory; it is valid until Free.
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.p), h.n) }

// Free releases the buffer (once; later calls do nothing).
func (h *HostBuffer) Free() error {
	if h == nil || h.p == nil {
		return nil
	}
	defer h.c.enter()()
	p := h.p
	h.p, h.n = nil, 0
	return check("cuMemFreeHost", api.cuMemFreeHost(p))
}
