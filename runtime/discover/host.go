// Package discover finds what a machine offers jitllm: the host (OS, CPU and
// its features, cores, memory) and every device a backend could use (the CPU;
// CUDA GPUs through the driver; Vulkan and Metal when their loaders are
// there), and checks a model against them: architecture, quant types and an
// estimate of the memory a load needs against the memory free. Every problem
// it reports carries a next action. `jitllm doctor` prints its Report.
package discover

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/cpuid/v2"
)

// Host describes the machine.
type Host struct {
	OS            string   `json:"os"`
	Arch          string   `json:"arch"`
	CPU           string   `json:"cpu"` // brand string
	Vendor        string   `json:"vendor,omitempty"`
	LogicalCores  int      `json:"logical_cores"`
	PhysicalCores int      `json:"physical_cores"`
	Features      []string `json:"features"` // CPU features as cpuid names them (AVX2, FMA3, ASIMD …)
	MemTotal      uint64   `json:"mem_total_bytes"`
	MemAvailable  uint64   `json:"mem_available_bytes"`
	// MemSource says where the memory figures come from ("/proc/meminfo",
	// "cgroup", "sysctl", or "unknown").
	MemSource string `json:"mem_source"`
}

// HostInfo reads the host.
func HostInfo() Host {
	h := Host{
		OS:            runtime.GOOS,
		Arch:          runtime.GOARCH,
		CPU:           strings.TrimSpace(cpuid.CPU.BrandName),
		Vendor:        cpuid.CPU.VendorString,
		LogicalCores:  cpuid.CPU.LogicalCores,
		PhysicalCores: cpuid.CPU.PhysicalCores,
		Features:      cpuid.CPU.FeatureSet(),
	}
	sort.Strings(h.Features)
	if h.CPU == "" {
		h.CPU = "unknown " + runtime.GOARCH + " CPU"
	}
	// Cores this process can use: cpuid counts the whole package, which a VM
	// or an affinity mask may not give us.
	h.LogicalCores = runtime.NumCPU()
	if h.PhysicalCores <= 0 || h.PhysicalCores > h.LogicalCores {
		h.PhysicalCores = max(1, h.LogicalCores/max(1, cpuid.CPU.ThreadsPerCore))
	}
	h.MemTotal, h.MemAvailable, h.MemSource = memory()
	return h
}

// memory is total and available RAM. On Linux it is /proc/meminfo, lowered
// to a cgroup v2 limit when the process runs under a tighter one.
func memory() (total, avail uint64, source string) {
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
