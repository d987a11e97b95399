package hostmem

import (
	"encoding/binary"
	"syscall"
)

// sysMemory is hw.memsize; macOS gives no cheap figure for free memory, so
// the total stands in (the unified memory is shared with the GPU).
func sysMemory() (total, avail uint64, ok bool) {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil {
		return 0, 0, false
	}
	b := []byte(s)
	for len(b) < 8 {
		b = append(b, 0) // Sysctl trims a trailing NUL
	}
	total = binary.LittleEndian.Uint64(b[:8])
	return total, total, total > 0
}
