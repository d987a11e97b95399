//go:build !unix

package mmap

import (
	"errors"
	"os"
)

// Map maps the first size bytes of f read-only.
func Map(*os.File, int64) ([]byte, error) { return nil, errors.New("no mmap on this platform") }

// Anon is n bytes of zeroed memory (the Go heap here).
func Anon(n int) ([]byte, error) {
	if n <= 0 {
		return nil, errors.New("mmap.Anon: size must be positive")
	}
	return make([]byte, n), nil
}

// Unmap releases a mapping made by Map (Anon's memory goes with the GC).
func Unmap([]byte) {}
