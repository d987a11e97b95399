package mmap

import "syscall"

// adviseHuge asks for transparent huge pages; a kernel without them keeps 4 KiB pages.
func adviseHuge(b []byte) { syscall.Madvise(b, syscall.MADV_HUGEPAGE) }
