//go:build !(linux || darwin || freebsd)

package discover

import "runtime"

// CUDALibrary is the one file the CUDA path needs: the driver's libcuda.
const CUDALibrary = "libcuda.so.1"

func unsupported(name, lib string) API {
	return API{Name: name, Library: lib, Devices: []Device{}, Problem: &Problem{apiSeverity(name),
		name + " is not probed on " + runtime.GOOS + " yet", "run jitllm on Linux (or macOS for Metal)"}}
}

// CUDA is not probed on this OS yet.
func CUDA() API { return unsupported("cuda", CUDALibrary) }

func probeCUDA(lib string) API { return unsupported("cuda", lib) }

// Vulkan is not probed on this OS yet.
func Vulkan() API { return unsupported("vulkan", "vulkan-1") }

// Metal exists only on macOS.
func Metal() API { return unsupported("metal", "Metal.framework") }
