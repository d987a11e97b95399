package discover

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/jitllm/jitllm/dsl"
	_ "github.com/jitllm/jitllm/graphs" // every family registers itself
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/capabilities"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gpuexec"
	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/weights"
)

// ModelReport is what doctor found about one model file.
type ModelReport struct {
	Path         string     `json:"path"`
	Format       string     `json:"format,omitempty"`
	Architecture string     `json:"architecture,omitempty"`
	Family       string     `json:"family,omitempty"`
	Supported    bool       `json:"supported"` // the architecture has a graph and the file builds it
	Parameters   int64      `json:"parameters"`
	QuantTypes   []QuantUse `json:"quant_types"`
	Estimate     *Estimate  `json:"estimate,omitempty"`
	Fits         []Fit      `json:"fits"`
	CanRun       bool       `json:"can_run"`
	Problems     []Problem  `json:"problems"`

	// CPUKernels is what the CPU backend's matmuls run on this CPU: each
	// dot-product order with the ISA of its kernel (native or Go).
	CPUKernels []exec.KernelUse `json:"cpu_kernels,omitempty"`
}

// QuantUse is one stored type of the model's bound tensors.
type QuantUse struct {
	Type    string   `json:"type"`
	Tensors int      `json:"tensors"`
	Bytes   int64    `json:"bytes"`
	MatMul  bool     `json:"matmul"`   // some tensor of the type feeds a matmul
	Backend []string `json:"backends"` // backends that compute the type as the model uses it
}

// Fit is the model on one device through one backend.
type Fit struct {
	Device    string    `json:"device"`
	Backend   string    `json:"backend"`
	NeedBytes int64     `json:"need_bytes"`
	FreeBytes uint64    `json:"free_bytes"`
	Quant     bool      `json:"quant_ok"`
	Memory    bool      `json:"memory_ok"`
	CanRun    bool      `json:"can_run"`
	Problems  []Problem `json:"problems,omitempty"`
}

// GiB formats a byte count for people.
func GiB(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
}

type srcEnv struct{ src weights.Source }

func (e srcEnv) Meta() *meta.Map { return e.src.Meta() }
func (e srcEnv) Has(name string) bool {
	_, ok := e.src.Tensor(name)
	return ok
}

// CheckModel checks the model at path against devs: its architecture, its
// quant types against each backend's kernels (from the capabilities table)
// and the memory a run with opt needs against each device's free memory.
func CheckModel(path string, devs []Device, opt Options) ModelReport {
	r := ModelReport{Path: path, QuantTypes: []QuantUse{}, Fits: []Fit{}, Problems: []Problem{}}
	fail := func(msg, action string) ModelReport {
		r.Problems = append(r.Problems, Problem{SevError, msg, action})
		return r
	}
	if _, err := os.Stat(path); err != nil {
		return fail(fmt.Sprintf("cannot read %s: %v", path, err), "check the path")
	}
	src, err := weights.Open(path)
	if err != nil {
		return fail(err.Error(), "jitllm reads GGUF and .jlm files; check the file is complete (jitllm inspect FILE)")
	}
	defer src.Close()
	r.Format = src.Format()
	for _, t := range src.Tensors() {
		r.Parameters += t.Elements()
	}
	r.Architecture, _ = src.Meta().String("general.architecture")
	caps := capabilities.Get()
	supported := strings.Join(caps.Architectures(), ", ")
	if r.Architecture == "" {
		return fail("the file has no general.architecture", "it is not a model jitllm can run; supported architectures: "+supported)
	}
	fam, ok := caps.Family(r.Architecture)
	if !ok {
		return fail(fmt.Sprintf("architecture %q has no graph in this build", r.Architecture),
			"supported architectures: "+supported+"; use a model of one of them (jitllm capabilities lists them)")
	}
	r.Family = fam.Name
	g, err := dsl.Build(srcEnv{src})
	if err != nil {
		return fail(err.Error(), "the file does not match the "+fam.Name+" graph: check it with jitllm inspect FILE, or re-convert it")
	}
	r.Supported = true
	if err := exec.CheckKVType(g, opt.KVType); err != nil {
		return fail(err.Error(), "run with -cache-type f16")
	}

	// How each bound weight is used decides which kernel it needs.
	matmul := make([]bool, len(g.Weights))
	for _, n := range g.Nodes {
		if n.Op == dsl.OpMatMul && n.Weight >= 0 {
			matmul[n.Weight] = true
		}
	}
	byType := map[quant.Type]*QuantUse{}
	var order []quant.Type
	for i, w := range g.Weights {
		t, _ := src.Tensor(w.GGUF)
		q := byType[t.Type]
		if q == nil {
			q = &QuantUse{Type: t.Type.String()}
			byType[t.Type] = q
			order = append(order, t.Type)
		}
		q.Tensors++
		q.Bytes += t.Size
		q.MatMul = q.MatMul || matmul[i]
	}
	sort.Slice(order, func(i, j int) bool { return byType[order[i]].Bytes > byType[order[j]].Bytes })
	for _, t := range order {
		q := byType[t]
		q.Backend = []string{}
		for _, b := range caps.Backends {
			if covers(b, *q) {
				q.Backend = append(q.Backend, b.Name)
			}
		}
		r.QuantTypes = append(r.QuantTypes, *q)
		if len(q.Backend) == 0 {
			r.Problems = append(r.Problems, Problem{SevError,
				fmt.Sprintf("%d tensors are %s, which no backend of this build can compute", q.Tensors, q.Type),
				"use a file quantized to a covered type (Q4_K_M, Q5_K_M, Q8_0, F16 …; jitllm capabilities lists them)"})
		}
	}

	r.CPUKernels = cpuKernels(g, src)

	est, err := EstimateMemory(g, src, opt)
	if err != nil {
		return fail(err.Error(), "re-convert the model")
	}
	r.Estimate = &est
	for _, d := range devs {
		for _, bn := range d.Backends {
			b, ok := caps.Backend(bn)
			if !ok {
				continue
			}
			e := est
			if d.Kind == "cuda" {
				// The GPU holds what gpuexec's own plan allocates.
				if ge, err := gpuEstimate(src, est.Context); err == nil {
					e.Total, e.Overhead = ge, 0
				}
			}
			f := fitOn(d, b, r.QuantTypes, e)
			if d.Kind == "cuda" && est.KVType != exec.KVF16 {
				f.CanRun = false
				f.Problems = append(f.Problems, Problem{SevError, cudaKVType, "run on cpu (-devices cpu) or with -cache-type f16"})
			}
			r.Fits = append(r.Fits, f)
			r.CanRun = r.CanRun || f.CanRun
		}
	}
	if len(r.Fits) == 0 {
		r.Problems = append(r.Problems, Problem{SevError, "no device of this host has a backend in this build", "run on a host with a CPU backend (amd64 or arm64)"})
	}
	for _, f := range r.Fits {
		r.Problems = append(r.Problems, f.Problems...)
	}
	return r
}

func covers(b capabilities.Backend, q QuantUse) bool {
	c, ok := b.QuantType(q.Type)
	return ok && c.Decode && (!q.MatMul || c.MatMul)
}

func fitOn(d Device, b capabilities.Backend, qs []QuantUse, est Estimate) Fit {
	f := Fit{Device: d.ID, Backend: b.Name, NeedBytes: est.Total, FreeBytes: d.MemFree, Quant: true}
	for _, q := range qs {
		if !covers(b, q) {
			f.Quant = false
			if len(q.Backend) == 0 {
				continue // the model-level problem already says no backend computes it
			}
			f.Problems = append(f.Problems, Problem{SevError,
				fmt.Sprintf("the %s backend cannot compute %s (%d tensors) on %s", b.Name, q.Type, q.Tensors, d.ID),
				"use a file quantized to a type it covers (jitllm capabilities lists them)"})
		}
	}
	unknown := d.MemFree == 0 && d.MemTotal == 0
	f.Memory = unknown || uint64(est.Total) <= d.MemFree
	if !f.Memory {
		action := "use -devices auto to split the model across devices"
		if d.Kind == "cpu" {
			action = fmt.Sprintf("free memory, pick a smaller quantization, or lower the context (-ctx; the KV cache of %d positions takes %s)", est.Context, GiB(est.KV))
		}
		f.Problems = append(f.Problems, Problem{SevError,
			fmt.Sprintf("model needs %s, %s has %s free", GiB(est.Total), d.ID, GiB(int64(d.MemFree))), action})
	}
	f.CanRun = f.Quant && f.Memory
	return f
}

// cudaKVType is why a CUDA device cannot take a cache type other than f16.
const cudaKVType = "the CUDA runner keeps an f16 KV cache; -cache-type q8_0 runs on cpu"

// gpuEstimate is the device memory the CUDA backend allocates for the model
// with a KV cache of context positions (gpuexec.EstimateBytes).
func gpuEstimate(src weights.Source, context int) (int64, error) {
	m, err := exec.Load(src)
	if err != nil {
		return 0, err
	}
	return gpuexec.EstimateBytes(m, context)
}
