package cuda

import "syscall"

// libraryNames is the driver's name on Windows.
var libraryNames = []string{"nvcuda.dll"}

func openLibrary(name string) (uintptr, error) {
	h, err := syscall.LoadLibrary(name)
	return uintptr(h), err
}

func symbol(lib uintptr, name string) (uintptr, error) {
	return syscall.GetProcAddress(syscall.Handle(lib), name)
}
