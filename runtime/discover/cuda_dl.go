//go:build linux || darwin || freebsd

package discover

import (
	"errors"
	"fmt"

	"github.com/jitllm/jitllm/runtime/cuda"
)

// CUDALibrary is the one file the CUDA path needs: the driver's libcuda.
const CUDALibrary = "libcuda.so.1"

// CUDA probes the NVIDIA driver: every device's name, compute capability,
// total and free memory, and the driver version.
func CUDA() API { return probeCUDA(CUDALibrary) }

// probeCUDA asks the driver, through runtime/cuda (the one binding of it),
// for every device's name, compute capability, total and free memory.
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
	err := cuda.LoadLibrary(libName)
	var rc cuda.Result
	switch {
	case errors.Is(err, cuda.ErrNoDriver):
		api.Problem = &Problem{sev, "no CUDA driver found (" + libName + " did not load)",
			"install the NVIDIA driver; jitllm needs only " + libName + " (no CUDA toolkit)"}
		return api
	case errors.Is(err, cuda.ErrOldDriver):
		api.Present = true
		api.Problem = &Problem{sev, "the CUDA driver in " + libName + " is too old or incomplete (" + err.Error() + ")",
			"update the NVIDIA driver (CUDA 11 or later)"}
		return api
	case errors.As(err, &rc):
		api.Present = true
		msg, action := cudaInitError(int32(rc))
		api.Problem = &Problem{sev, msg, action}
		return api
	case err != nil:
		api.Problem = &Problem{sev, err.Error(), "check the driver with nvidia-smi"}
		return api
	}
	api.Present = true
	if v, err := cuda.DriverVersion(); err == nil && v > 0 {
		api.Driver = driverVersion(int32(v))
	}
	infos, err := cuda.Devices()
	if err != nil || len(infos) == 0 {
		api.Problem = &Problem{sev, "the CUDA driver reports no devices", "check nvidia-smi and CUDA_VISIBLE_DEVICES"}
		return api
	}
	for _, in := range infos {
		d := Device{ID: fmt.Sprintf("cuda:%d", in.Ordinal), Kind: "cuda", Driver: api.Driver, Backends: backendsFor("cuda"),
			Name: in.Name, ComputeCapability: fmt.Sprintf("%d.%d", in.Major, in.Minor), MemTotal: in.TotalMemory}
		// Free memory needs a context: the device's primary one, released after.
		if c, err := cuda.Open(in.Ordinal); err == nil {
			if free, _, err := c.MemInfo(); err == nil {
				d.MemFree = free
			}
			c.Close()
		} else {
			d.Problems = append(d.Problems, Problem{SevWarning, fmt.Sprintf("cannot open a context on %s (%v): its free memory is unknown", d.ID, err),
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
