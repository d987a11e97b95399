package discover

import (
	"fmt"
	"runtime"

	"github.com/jitllm/jitllm/runtime/capabilities"
)

// Severity of a problem: an error stops a model from running; a warning
// limits it (a device unusable, a slower path); info is for the record.
const (
	SevError   = "error"
	SevWarning = "warning"
	SevInfo    = "info"
)

// Problem is something doctor found, always with what to do about it.
type Problem struct {
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Action   string `json:"action"`
}

func (p Problem) String() string { return p.Message + ": " + p.Action }

// Device is one place a backend could run a model.
type Device struct {
	ID       string `json:"id"`   // "cpu", "cuda:0", …
	Kind     string `json:"kind"` // cpu, cuda, vulkan, metal
	Name     string `json:"name"`
	MemTotal uint64 `json:"mem_total_bytes"`
	MemFree  uint64 `json:"mem_free_bytes"`
	// ComputeCapability is a CUDA device's "major.minor".
	ComputeCapability string `json:"compute_capability,omitempty"`
	Driver            string `json:"driver,omitempty"`
	// Backends are the backends of this build that run on the device; none
	// means it is listed but nothing here can use it yet.
	Backends []string  `json:"backends"`
	Problems []Problem `json:"problems,omitempty"`
}

// API is one device API probed through its loader library.
type API struct {
	Name    string   `json:"name"`    // cuda, vulkan, metal
	Library string   `json:"library"` // what was opened
	Present bool     `json:"present"`
	Driver  string   `json:"driver,omitempty"`
	Devices []Device `json:"devices"`
	Problem *Problem `json:"problem,omitempty"`
}

// CPUDevice is the host CPU as a device: its memory is the host's available RAM.
func CPUDevice(h Host) Device {
	d := Device{ID: "cpu", Kind: "cpu", Name: h.CPU, MemTotal: h.MemTotal, MemFree: h.MemAvailable}
	d.Backends = backendsFor("cpu")
	if h.MemSource == "unknown" {
		d.Problems = append(d.Problems, Problem{SevWarning,
			"free memory of this " + runtime.GOOS + " host is unknown",
			"memory fit is not checked; watch the process's memory on first load"})
	}
	return d
}

// Devices lists the CPU and every device the GPU APIs report, with the
// probes themselves (whose Problem says why an API has no devices).
func Devices(h Host) ([]Device, []API) {
	devs := []Device{CPUDevice(h)}
	apis := []API{CUDA(), Vulkan(), Metal()}
	for _, a := range apis {
		devs = append(devs, a.Devices...)
	}
	return devs, apis
}

func backendsFor(kind string) []string {
	var out []string
	for _, b := range capabilities.Get().ForDevice(kind) {
		out = append(out, b.Name)
	}
	if out == nil {
		out = []string{}
	}
	return out
}

// apiSeverity is a warning when a backend of this build needs the API, info
// otherwise (nothing here would use it yet).
func apiSeverity(kind string) string {
	if len(backendsFor(kind)) > 0 {
		return SevWarning
	}
	return SevInfo
}

// noBackend is the problem of a device that nothing in this build runs on.
func noBackend(kind string) Problem {
	return Problem{SevInfo, fmt.Sprintf("this build has no %s backend yet", kind),
		"models run on the CPU; see jitllm capabilities for the backends compiled in"}
}

func driverVersion(v int32) string {
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}
