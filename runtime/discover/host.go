// Package discover finds what a machine offers jitllm: the host (OS, CPU and
// its features, cores, memory) and every device a backend could use (the CPU;
// CUDA GPUs through the driver; Vulkan and Metal when their loaders are
// there), and checks a model against them: architecture, quant types and an
// estimate of the memory a load needs against the memory free. Every problem
// it reports carries a next action. `jitllm doctor` prints its Report.
package discover

import (
	"runtime"
	"sort"
	"strings"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/runtime/hostmem"
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
	h.MemTotal, h.MemAvailable, h.MemSource = hostmem.Read()
	return h
}
