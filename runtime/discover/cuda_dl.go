//go:build linux || darwin || freebsd

package discover

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// CUDALibrary is the one file the CUDA path needs: the driver's libcuda.
const CUDALibrary = "libcuda.so.1"

// CUDA probes the NVIDIA driver: every device's name, compute capability,
// total and free memory, and the driver version.
func CUDA() API { return probeCUDA(CUDALibrary) }

func openLib(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// bind resolves each symbol of a table into its Go function pointer; it
// fails (never panics) when one is missing.
func bind(lib uintptr, fns map[string]any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	for name, fp := range fns {
		sym, err := purego.Dlsym(lib, name)
		if err != nil {
			return fmt.Errorf("symbol %s: %w", name, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	return nil
}

func probeCUDA(libName string) (api API) {
	api = API{Name: "cuda", Library: libName, Devices: []Device{}}
	sev := apiSeverity("cuda")
	defer func() {
		if r := recover(); r != nil {
			api.Devices = []Device{}
			api.Problem = &Problem{sev, fmt.Sprintf("the CUDA driver failed while being queried (%v)", r),
				"check the driver with nvidia-smi; reinstall the NVIDIA driver if it fails too"}
		}
	}()
	lib, err := openLib(libName)
	if err != nil {
		api.Problem = &Problem{sev, "no CUDA driver found (" + libName + " did not load)",
			"install the NVIDIA driver; jitllm needs only " + libName + " (no CUDA toolkit)"}
		return api
	}
	api.Present = true
	var (
		cuInit               func(flags uint32) int32
		cuDriverGetVersion   func(v *int32) int32
		cuDeviceGetCount     func(n *int32) int32
		cuDeviceGet          func(dev *int32, ordinal int32) int32
		cuDeviceGetName      func(name *byte, n int32, dev int32) int32
		cuDeviceGetAttribute func(v *int32, attr int32, dev int32) int32
		cuDeviceTotalMem     func(bytes *uint64, dev int32) int32
		cuPrimaryCtxRetain   func(ctx *uintptr, dev int32) int32
		cuPrimaryCtxRelease  func(dev int32) int32
		cuCtxSetCurrent      func(ctx uintptr) int32
		cuMemGetInfo         func(free, total *uint64) int32
	)
	if err := bind(lib, map[string]any{
		"cuInit": &cuInit, "cuDriverGetVersion": &cuDriverGetVersion, "cuDeviceGetCount": &cuDeviceGetCount,
		"cuDeviceGet": &cuDeviceGet, "cuDeviceGetName": &cuDeviceGetName, "cuDeviceGetAttribute": &cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2": &cuDeviceTotalMem, "cuDevicePrimaryCtxRetain": &cuPrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": &cuPrimaryCtxRelease, "cuCtxSetCurrent": &cuCtxSetCurrent,
		"cuMemGetInfo_v2": &cuMemGetInfo,
	}); err != nil {
		api.Problem = &Problem{sev, "the CUDA driver in " + libName + " is too old or incomplete (" + err.Error() + ")",
			"update the NVIDIA driver (CUDA 11 or later)"}
		return api
	}
	var ver int32
	if cuDriverGetVersion(&ver) == 0 && ver > 0 {
		api.Driver = driverVersion(ver)
	}
	if rc := cuInit(0); rc != 0 {
		msg, action := cudaInitError(rc)
		api.Problem = &Problem{sev, msg, action}
		return api
	}
	var n int32
	if rc := cuDeviceGetCount(&n); rc != 0 || n == 0 {
		api.Problem = &Problem{sev, "the CUDA driver reports no devices", "check nvidia-smi and CUDA_VISIBLE_DEVICES"}
		return api
	}
	for i := int32(0); i < n; i++ {
		var dev int32
		if rc := cuDeviceGet(&dev, i); rc != 0 {
			continue
		}
		d := Device{ID: fmt.Sprintf("cuda:%d", i), Kind: "cuda", Driver: api.Driver, Backends: backendsFor("cuda")}
		var name [256]byte
		if cuDeviceGetName(&name[0], int32(len(name)), dev) == 0 {
			d.Name = cString(name[:])
		}
		var major, minor int32
		if cuDeviceGetAttribute(&major, 75, dev) == 0 && cuDeviceGetAttribute(&minor, 76, dev) == 0 {
			d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
		}
		cuDeviceTotalMem(&d.MemTotal, dev)
		// Free memory needs a context: the device's primary one, released after.
		var ctx uintptr
		if rc := cuPrimaryCtxRetain(&ctx, dev); rc == 0 {
			var free, total uint64
			if cuCtxSetCurrent(ctx) == 0 && cuMemGetInfo(&free, &total) == 0 {
				d.MemFree = free
			}
			cuCtxSetCurrent(0)
			cuPrimaryCtxRelease(dev)
		} else {
			d.Problems = append(d.Problems, Problem{SevWarning, fmt.Sprintf("cannot open a context on %s (CUDA error %d): its free memory is unknown", d.ID, rc),
				"check whether the GPU is in exclusive-process mode and busy (nvidia-smi)"})
		}
		if len(d.Backends) == 0 {
			d.Problems = append(d.Problems, noBackend("cuda"))
		}
		api.Devices = append(api.Devices, d)
	}
	return api
}

// cudaInitError explains a cuInit failure.
func cudaInitError(rc int32) (string, string) {
	switch rc {
	case 100:
		return "the CUDA driver is installed but finds no GPU (CUDA_ERROR_NO_DEVICE)", "check that the GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES, container --gpus)"
	case 35:
		return "the CUDA driver is older than the CUDA runtime it was paired with (CUDA_ERROR_INSUFFICIENT_DRIVER)", "update the NVIDIA driver"
	case 803, 804:
		return fmt.Sprintf("the CUDA user-mode driver does not match the kernel module (CUDA error %d)", rc), "reboot after a driver update, or reinstall the NVIDIA driver"
	case 999:
		return "the CUDA driver failed to initialize (CUDA_ERROR_UNKNOWN)", "check dmesg for NVRM errors; reloading the nvidia kernel module or rebooting usually clears it"
	}
	return fmt.Sprintf("cuInit failed with CUDA error %d", rc), "check the driver with nvidia-smi"
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
