//go:build unix && !linux

package mmap

func adviseHuge([]byte) {}
