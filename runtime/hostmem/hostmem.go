// Package hostmem reads how much RAM the machine has and how much is free
// for a new allocation (the page cache counts as free: the kernel drops it
// on demand). discover reports it; the CPU runner sizes its resident
// weights by it.
package hostmem

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Read is total and available RAM and where the figures come from
// ("/proc/meminfo", "cgroup", "sysctl", or "unknown": both 0). On Linux it is /proc/meminfo, lowered
// to a cgroup v2 limit when the process runs under a tighter one.
func Read() (total, avail uint64, source string) {
	if runtime.GOOS == "linux" {
		if b, err := os.ReadFile("/proc/meminfo"); err == nil {
			total, avail = parseMeminfo(b)
			source = "/proc/meminfo"
			if lim, used, ok := cgroupMem(); ok && lim < total {
				total, source = lim, "cgroup"
				if free := lim - min(used, lim); free < avail {
					avail = free
				}
			}
			if total > 0 {
				return total, avail, source
			}
		}
	}
	if t, a, ok := sysMemory(); ok {
		return t, a, "sysctl"
	}
	return 0, 0, "unknown"
}

// parseMeminfo reads MemTotal and MemAvailable (kB) from /proc/meminfo.
// Kernels before 3.14 lack MemAvailable: MemFree + Cached stands in.
func parseMeminfo(b []byte) (total, avail uint64) {
	var free, cached uint64
	haveAvail := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		n *= 1024
		switch k {
		case "MemTotal":
			total = n
		case "MemAvailable":
			avail, haveAvail = n, true
		case "MemFree":
			free = n
		case "Cached":
			cached = n
		}
	}
	if !haveAvail {
		avail = free + cached
	}
	return total, avail
}

func cgroupMem() (limit, used uint64, ok bool) {
	b, err := os.ReadFile("/sys/fs/cgroup/memory.max")
	if err != nil {
		return 0, 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, 0, false
	}
	limit, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.current"); err == nil {
		used, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	return limit, used, true
}
