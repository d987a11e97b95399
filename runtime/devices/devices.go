// Package devices turns a -devices value (cpu, cuda, cuda:N, auto, or a
// list such as cuda:0,cuda:1 or cpu,cuda:0) into the runner of that
// backend, or a runtime/sched pipeline over the devices listed, so the CLI,
// the benchmark and the server choose devices one way.
package devices

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gpuexec"
	"github.com/jitllm/jitllm/runtime/sched"
)

// Runner is what every backend's runner offers a session.
type Runner interface {
	Forward(tokens []int32) ([]float32, error)
	Truncate(n int)
	Pos() int
	Context() int
	Close()
}

// Names lists the -devices values Resolve accepts (one device).
const Names = "cpu, cuda, cuda:0, auto"

// ListNames lists the -devices values NewRunner accepts.
const ListNames = "cpu, cuda, cuda:N, auto, or a list to split the model over (cpu,cuda:0; cuda:0,cuda:1)"

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
			return "", fmt.Errorf("-devices %s: here a model runs on one device (cpu, cuda:0 or auto); splits over several run in jitllm run and speed", s)
		}
		return "", fmt.Errorf("-devices %s: unknown device (want one of %s)", s, Names)
	}
}

// Parse checks a -devices value for NewRunner: "auto" (auto true), one
// device, or a list of them (sched.ParseList), returned as device ids.
func Parse(spec string) (ids []string, auto bool, err error) {
	switch s := strings.TrimSpace(spec); s {
	case "", "cpu":
		return []string{"cpu"}, false, nil
	case "auto":
		return nil, true, nil
	default:
		ids, err := sched.ParseList(s)
		if err != nil {
			return nil, false, fmt.Errorf("-devices %s: %w; -devices takes %s", s, err, ListNames)
		}
		return ids, false, nil
	}
}

// checkKVType refuses a cache type that only the CPU runner keeps when a
// CUDA device is among ids: gpuexec's caches are f16, and a silent f16
// cache would not be what was asked.
func checkKVType(ids []string, kvType string) error {
	t, err := exec.ParseKVType(kvType)
	if err != nil || t == exec.KVF16 {
		return err
	}
	for _, id := range ids {
		if id != "cpu" {
			return fmt.Errorf("the CUDA runner keeps an f16 KV cache; --cache-type %s runs on cpu (-devices cpu)", t)
		}
	}
	return nil
}

// autoIDs are the devices auto may use: every CUDA device, then the CPU.
func autoIDs() []string {
	devs, err := cuda.Devices()
	if err != nil || len(devs) == 0 {
		return []string{"cpu"}
	}
	var ids []string
	for i := range devs {
		ids = append(ids, fmt.Sprintf("cuda:%d", i))
	}
	return append(ids, "cpu")
}

// NewRunner plans m on the devices spec names. Several devices (a list, or
// auto when the model fits no single device) run as a runtime/sched
// pipeline: a list shares the blocks among all its devices by speed, auto
// uses the fewest devices, fastest first, that hold the model.
func NewRunner(m *exec.Model, spec string, opt exec.Options) (Runner, string, error) {
	ids, auto, err := Parse(spec)
	if err != nil {
		return nil, "", err
	}
	so := sched.Options{Options: opt, Piece: opt.MaxBatch}
	if auto {
		ids = autoIDs()
	}
	if err := checkKVType(ids, opt.KVType); err != nil {
		return nil, "", fmt.Errorf("-devices %s: %w", spec, err)
	}
	if auto && len(ids) > 1 {
		devs, err := sched.Devices(ids)
		if err != nil {
			return nil, "", fmt.Errorf("-devices auto: %w", err)
		}
		pl, err := sched.PlanOn(m, devs, so, true)
		if err != nil {
			return nil, "", fmt.Errorf("-devices auto: %w", err)
		}
		ids = []string{pl[0].Device.ID}
		if len(pl) > 1 {
			r, err := sched.New(m, pl, so)
			if err != nil {
				return nil, "", err
			}
			return r, "split " + pl.Short(), nil
		}
	}
	if len(ids) > 1 {
		r, err := sched.Open(m, ids, so, false)
		if errors.Is(err, cuda.ErrNoDriver) {
			return nil, "", fmt.Errorf("-devices %s: %w", spec, err)
		}
		if err != nil {
			return nil, "", err
		}
		return r, "split " + r.Stages().Short(), nil
	}
	if dev := ids[0]; dev != "cpu" {
		fmt.Sscanf(dev, "cuda:%d", &opt.Device) // ParseList wrote it so
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
