//go:build linux || darwin || freebsd

package discover

import (
	"runtime"

	"github.com/ebitengine/purego"
)

// vulkanLibrary is the Vulkan loader's name on this OS.
func vulkanLibrary() string {
	if runtime.GOOS == "darwin" {
		return "libvulkan.1.dylib"
	}
	return "libvulkan.so.1"
}

// Vulkan reports whether the Vulkan loader is there (devices are not
// enumerated yet: no Vulkan backend exists to use them).
func Vulkan() API {
	return probeLoader("vulkan", vulkanLibrary(), "install your GPU's Vulkan driver and loader (e.g. libvulkan1 and mesa-vulkan-drivers)")
}

const metalFramework = "/System/Library/Frameworks/Metal.framework/Metal"

// Metal reports whether the Metal framework is there (macOS only).
func Metal() API {
	if runtime.GOOS != "darwin" {
		return API{Name: "metal", Library: metalFramework, Devices: []Device{},
			Problem: &Problem{SevInfo, "Metal exists only on macOS", "nothing to do on " + runtime.GOOS}}
	}
	return probeLoader("metal", metalFramework, "Metal ships with macOS 10.13 and later; update macOS")
}

func probeLoader(name, lib, install string) API {
	api := API{Name: name, Library: lib, Devices: []Device{}}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		api.Problem = &Problem{apiSeverity(name), "no " + name + " loader found (" + lib + " did not load)", install}
		return api
	}
	purego.Dlclose(h)
	api.Present = true
	if len(backendsFor(name)) == 0 {
		p := noBackend(name)
		p.Message = name + " loader found, but " + p.Message
		api.Problem = &p
	}
	return api
}
