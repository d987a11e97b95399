//go:build !windows

package cuda

import "github.com/ebitengine/purego"

// libraryNames are the driver's names on Linux (elsewhere Load says CUDA is
// not available before trying them).
var libraryNames = []string{"libcuda.so.1", "libcuda.so"}

func openLibrary(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func symbol(lib uintptr, name string) (uintptr, error) { return purego.Dlsym(lib, name) }
