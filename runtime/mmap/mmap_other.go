//go:build !unix

package mmap

import (
	"errors"
	"os"
)

// Map maps the first size bytes of f read-only.
func Map(*os.File, int64) ([]byte, error) { return nil, errors.New("no mmap on this platform") }

// Unmap releases a mapping made by Map.
func Unmap([]byte) {}
