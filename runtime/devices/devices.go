// Package devices turns a -devices value (cpu, cuda, cuda:0, auto) into the
// runner of that backend, so the CLI, the benchmark and the server choose a
// device one way.
package devices

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gpuexec"
)

// Runner is what every backend's runner offers a session.
type Runner interface {
	Forward(tokens []int32) ([]float32, error)
	Truncate(n int)
	Pos() int
	Context() int
	Close()
}

// Names lists the accepted -devices values.
const Names = "cpu, cuda, cuda:0, auto"

// Resolve maps a -devices value to "cpu" or "cuda"; auto picks cuda when a
// driver and a device are there.
func Resolve(spec string) (string, error) {
	switch s := strings.TrimSpace(spec); s {
	case "", "cpu":
		return "cpu", nil
	case "cuda", "cuda:0":
		return "cuda", nil
	case "auto":
		if devs, err := cuda.Devices(); err == nil && len(devs) > 0 {
			return "cuda", nil
		}
		return "cpu", nil
	default:
		if strings.HasPrefix(s, "cuda:") || strings.Contains(s, ",") {
			return "", fmt.Errorf("-devices %s: this build runs a model on one device (cuda:0); splitting over several is not built yet", s)
		}
		return "", fmt.Errorf("-devices %s: unknown device (want one of %s)", s, Names)
	}
}

// NewRunner plans m on the device spec names.
func NewRunner(m *exec.Model, spec string, opt exec.Options) (Runner, string, error) {
	dev, err := Resolve(spec)
	if err != nil {
		return nil, "", err
	}
	if dev == "cuda" {
		r, err := gpuexec.NewRunner(m, opt)
		if errors.Is(err, cuda.ErrNoDriver) {
			return nil, "", fmt.Errorf("-devices %s: %w", spec, err)
		}
		if err != nil {
			return nil, "", err
		}
		return r, "CUDA", nil
	}
	r, err := exec.NewRunner(m, opt)
	if err != nil {
		return nil, "", err
	}
	return r, "CPU", nil
}
