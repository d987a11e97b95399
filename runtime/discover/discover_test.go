package discover

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/weights"
)

func TestHost(t *testing.T) {
	h := HostInfo()
	if h.OS != runtime.GOOS || h.Arch != runtime.GOARCH {
		t.Errorf("host %s/%s, running on %s/%s", h.OS, h.Arch, runtime.GOOS, runtime.GOARCH)
	}
	if h.LogicalCores != runtime.NumCPU() || h.PhysicalCores < 1 || h.PhysicalCores > h.LogicalCores {
		t.Errorf("cores %d logical, %d physical (NumCPU %d)", h.LogicalCores, h.PhysicalCores, runtime.NumCPU())
	}
	if h.CPU == "" {
		t.Error("no CPU name")
	}
	if runtime.GOARCH == "amd64" && !contains(h.Features, "SSE2") {
		t.Errorf("amd64 CPU without SSE2 in %v", h.Features)
	}
	if runtime.GOOS == "linux" {
		if h.MemTotal == 0 || h.MemAvailable == 0 || h.MemAvailable > h.MemTotal {
			t.Errorf("memory %d total, %d available (%s)", h.MemTotal, h.MemAvailable, h.MemSource)
		}
	}
}

// The path every machine without an NVIDIA driver takes: a reason and the
// next action, no panic, no devices.
func TestCUDANoDriver(t *testing.T) {
	api := probeCUDA("libcuda-jitllm-missing.so.1")
	if api.Present || len(api.Devices) != 0 || api.Problem == nil {
		t.Fatalf("missing library: %+v", api)
	}
	if runtime.GOOS == "linux" {
		if !strings.Contains(api.Problem.Message, "no CUDA driver found") ||
			!strings.Contains(api.Problem.Action, "install the NVIDIA driver; jitllm needs only libcuda-jitllm-missing.so.1") {
			t.Errorf("problem %q", api.Problem)
		}
	}
	if api.Problem.Action == "" {
		t.Error("a problem without a next action")
	}
}

func TestCUDA(t *testing.T) {
	api := CUDA()
	if !api.Present {
		t.Skipf("no CUDA driver on this machine (%s); the device path is checked where one is", api.Problem)
	}
	if api.Problem != nil && len(api.Devices) == 0 {
		t.Skipf("CUDA driver present but unusable here: %s", api.Problem)
	}
	if api.Driver == "" {
		t.Error("no driver version")
	}
	for _, d := range api.Devices {
		t.Logf("%s %s cc %s, %s total, %s free, driver %s", d.ID, d.Name, d.ComputeCapability, GiB(int64(d.MemTotal)), GiB(int64(d.MemFree)), d.Driver)
		if d.Name == "" || d.ComputeCapability == "" || d.MemTotal == 0 {
			t.Errorf("%s: incomplete %+v", d.ID, d)
		}
		if d.MemFree == 0 || d.MemFree > d.MemTotal {
			t.Errorf("%s: free %d of %d", d.ID, d.MemFree, d.MemTotal)
		}
	}
}

func TestLoaders(t *testing.T) {
	for _, a := range []API{Vulkan(), Metal()} {
		if !a.Present && (a.Problem == nil || a.Problem.Action == "") {
			t.Errorf("%s absent without a reason and an action: %+v", a.Name, a)
		}
		if runtime.GOOS != "darwin" && a.Name == "metal" && a.Present {
			t.Error("metal present off macOS")
		}
	}
}

func TestDoctorNoModel(t *testing.T) {
	r := Doctor("", Options{})
	if !r.OK || r.Model != nil || len(r.Devices) == 0 || r.Devices[0].ID != "cpu" {
		t.Fatalf("report %+v", r)
	}
	if !contains(r.Devices[0].Backends, "cpu") {
		t.Errorf("the CPU has no backend: %v", r.Devices[0].Backends)
	}
	for _, p := range r.Problems {
		if p.Message == "" || p.Action == "" {
			t.Errorf("problem without message or action: %+v", p)
		}
	}
}

func cpuOnly(free uint64) []Device {
	return []Device{{ID: "cpu", Kind: "cpu", Name: "test", MemTotal: free, MemFree: free, Backends: []string{"cpu"}}}
}

func TestCheckModel(t *testing.T) {
	r := CheckModel("../../testdata/synthetic/tiny256-Q8_0.gguf", cpuOnly(8<<30), Options{})
	if !r.CanRun || !r.Supported || r.Architecture != "llama" || len(r.Problems) != 0 {
		t.Fatalf("tiny256-Q8_0 on 8 GiB: %+v", r)
	}
	var types []string
	for _, q := range r.QuantTypes {
		types = append(types, q.Type)
	}
	if !contains(types, "Q8_0") {
		t.Errorf("quant types %v", types)
	}
}

func TestCheckModelTooBig(t *testing.T) {
	r := CheckModel("../../testdata/stories260K.gguf", cpuOnly(16<<20), Options{})
	if r.CanRun {
		t.Fatalf("fits in 16 MiB with %d bytes needed", r.Estimate.Total)
	}
	p := firstError(r.Problems)
	if !strings.Contains(p.Message, "model needs ") || !strings.Contains(p.Message, "cpu has 16.0 MiB free") || !strings.Contains(p.Action, "-ctx") {
		t.Errorf("problem %q", p)
	}
}

func TestCheckModelUnknownArch(t *testing.T) {
	path := rewrite(t, "../../testdata/stories260K.gguf", func(name string, ty quant.Type) quant.Type { return ty }, "mamba9")
	r := CheckModel(path, cpuOnly(8<<30), Options{})
	if r.CanRun || r.Supported {
		t.Fatal("an unknown architecture can run")
	}
	p := firstError(r.Problems)
	if !strings.Contains(p.Message, `"mamba9"`) || !strings.Contains(p.Action, "llama") {
		t.Errorf("problem %q", p)
	}
}

func TestCheckModelUncoveredQuant(t *testing.T) {
	// Q8_K decodes on the CPU but has no matmul kernel there.
	path := rewrite(t, "../../testdata/synthetic/tiny256-Q8_0.gguf", func(name string, ty quant.Type) quant.Type {
		if name == "blk.0.attn_q.weight" {
			return quant.Q8_K
		}
		return ty
	}, "")
	r := CheckModel(path, cpuOnly(8<<30), Options{})
	if r.CanRun {
		t.Fatal("a matmul over Q8_K can run on the CPU")
	}
	p := firstError(r.Problems)
	if !strings.Contains(p.Message, "1 tensors are Q8_K") || p.Action == "" {
		t.Errorf("problem %q", p)
	}
}

func TestCheckModelMissing(t *testing.T) {
	r := CheckModel(filepath.Join(t.TempDir(), "none.gguf"), cpuOnly(8<<30), Options{})
	if r.CanRun || len(r.Problems) == 0 || r.Problems[0].Action == "" {
		t.Fatalf("%+v", r)
	}
}

// rewrite copies a GGUF with each tensor's type chosen by retype (data
// zeroed where the type changes) and, when arch is set, another architecture.
func rewrite(t *testing.T, path string, retype func(string, quant.Type) quant.Type, arch string) string {
	t.Helper()
	src, err := weights.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	md := src.Meta()
	if arch != "" {
		old, _ := md.String("general.architecture")
		var m meta.Map
		for _, kv := range md.All() {
			k := kv.Key
			if rest, ok := strings.CutPrefix(k, old+"."); ok {
				k = arch + "." + rest
			}
			m.Set(k, kv.Value)
		}
		m.Set("general.architecture", meta.Str(arch))
		md = &m
	}
	var ts []gguf.WriteTensor
	for _, ti := range src.Tensors() {
		data, err := src.Data(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		nt := retype(ti.Name, ti.Type)
		if nt != ti.Type {
			n, err := quant.RowBytes(nt, ti.Dims[0])
			if err != nil {
				t.Fatal(err)
			}
			data = make([]byte, n*(ti.Elements()/ti.Dims[0]))
		}
		ts = append(ts, gguf.WriteTensor{Name: ti.Name, Type: nt, Dims: ti.Dims, Data: gguf.Bytes(data)})
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Write(f, md, ts); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func firstError(ps []Problem) Problem {
	for _, p := range ps {
		if p.Severity == SevError {
			return p
		}
	}
	return Problem{}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A q8_0 cache is priced and checked: it fits on the CPU, the CUDA backend
// (f16 caches only) is marked unable to keep it, and heads of 8 values
// (stories260K) cannot.
func TestCheckModelKVType(t *testing.T) {
	devs := append(cpuOnly(8<<30), Device{ID: "cuda:0", Kind: "cuda", Name: "test", MemTotal: 8 << 30, MemFree: 8 << 30, Backends: []string{"cuda"}})
	r := CheckModel("../../testdata/synthetic/tiny256-Q8_0.gguf", devs, Options{KVType: exec.KVQ8_0})
	if !r.CanRun || r.Estimate == nil || r.Estimate.KVType != exec.KVQ8_0 || len(r.Fits) != 2 {
		t.Fatalf("tiny256 with q8_0: %+v", r)
	}
	for _, f := range r.Fits {
		if cuda := f.Device == "cuda:0"; f.CanRun == cuda || cuda != (len(f.Problems) == 1 && f.Problems[0].Message == cudaKVType) {
			t.Errorf("fit %+v", f)
		}
	}
	r = CheckModel("../../testdata/stories260K.gguf", cpuOnly(8<<30), Options{KVType: exec.KVQ8_0})
	if p := firstError(r.Problems); r.CanRun || !strings.Contains(p.Message, "multiple of 32") || !strings.Contains(p.Action, "-cache-type f16") {
		t.Errorf("stories260K with q8_0: %+v", r)
	}
}
