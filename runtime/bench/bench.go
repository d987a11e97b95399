// Package bench times a model on the CPU runner as llama-bench does: a
// prefill test (one forward of p tokens) and a decode test (n single-token
// forwards), each the best of r runs after a warm-up, reported as a
// llama-bench style table or as JSON. RunStreams (streams.go) times S
// concurrent sessions of one batching engine, as jitllm batch reports them.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/runtime/devices"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/tune"
	"github.com/jitllm/jitllm/runtime/weights"
)

// Config chooses the tests.
type Config struct {
	Prompt   int       // prefill test of this many tokens (pp<Prompt>); 0 skips it
	Gen      int       // decode test of this many tokens (tg<Gen>); 0 skips it
	Depth    int       // the decode test starts after an untimed prefill of this many tokens (0: from an empty cache, as llama-bench's tg)
	Reps     int       // runs of each test; the best counts (0 = 1)
	Threads  int       // worker threads (0 = one per CPU)
	MaxBatch int       // most rows in one forward (0 = min(Prompt, 512), as llama-bench's n_ubatch)
	Seed     uint64    // token ids are random in the vocabulary
	Devices  string    // -devices value (runtime/devices); "" = cpu
	Tune     tune.Mode // kernel tuning (exec.Options.Tune: CPU blocks, CUDA mat-vec shapes)
	Mmap     bool      // CPU weights stay in the file's mapping (exec.Options.Mmap)
	KVType   string    // KV cache type (exec.Options.KVType); "" = f16
	// Progress, when set, is told each run's figure as it is measured.
	Progress func(test string, run int, tps float64)
}

// Test is one test's measurements.
type Test struct {
	Name    string    `json:"test"` // pp512, tg128, tg128 @ d512
	Prompt  int       `json:"n_prompt"`
	Gen     int       `json:"n_gen"`
	Depth   int       `json:"n_depth"`
	Best    float64   `json:"t_s"` // tokens per second, the best run
	Mean    float64   `json:"avg_ts"`
	SD      float64   `json:"stddev_ts"`
	Samples []float64 `json:"samples_ts"`
}

// Report is a model's figures with what they were measured on.
type Report struct {
	Model    string        `json:"model"` // "llama 1B Q4_K - Medium", as llama-bench names it
	File     string        `json:"file"`
	Size     int64         `json:"size"`   // bytes of tensor data
	Params   int64         `json:"params"` // tensor elements
	Backend  string        `json:"backend"`
	Threads  int           `json:"threads"`
	MaxBatch int           `json:"n_batch"`
	KVType   string        `json:"type_kv"` // the KV cache's type, K's and V's (llama-bench's type_k, type_v)
	CPU      string        `json:"cpu,omitempty"`
	Cores    int           `json:"cores"`
	LoadAvg  [2][3]float64 `json:"-"` // 1, 5 and 15-minute load averages at the start and at the end
	Tests    []Test        `json:"tests"`
	// DecodeBytes is the weight bytes a decode step reads (DecodeBytes);
	// Bandwidth the bytes a second the device reads, measured after the
	// tests where the runner can (0 where it cannot): a decode test's
	// share of it is how near decode runs to the memory's limit.
	DecodeBytes int64   `json:"decode_bytes"`
	Bandwidth   float64 `json:"read_bandwidth,omitempty"`
}

// bandwidthMeter is a runner that can measure its device's read bandwidth
// (gpuexec's).
type bandwidthMeter interface {
	ReadBandwidth() (float64, error)
}

// DecodeBytes is the weight bytes one decode step of m reads: every
// weight a node reads whole, and one row of an embedding table that only
// the embedding reads (a table tied to the output head is read whole).
// Every matrix counts: the graphs have no routed experts.
func DecodeBytes(m *exec.Model) int64 {
	whole := make([]bool, len(m.Weights))
	row := make([]bool, len(m.Weights))
	for _, n := range m.Graph.Nodes {
		for _, w := range []int{n.Weight, n.Bias, n.Rope.FreqsW} {
			switch {
			case w < 0 || w >= len(whole):
			case n.Op == dsl.OpEmbed && w == n.Weight:
				row[w] = true
			default:
				whole[w] = true
			}
		}
	}
	var b int64
	for i, w := range m.Weights {
		switch {
		case whole[i]:
			b += int64(len(w.Data))
		case row[i] && len(w.Dims) == 2 && w.Dims[1] > 0:
			b += int64(len(w.Data)) / w.Dims[1]
		}
	}
	return b
}

// Row is one line of the table: the report's fields with one test's.
type Row struct {
	Model     string     `json:"model"`
	File      string     `json:"file"`
	Size      int64      `json:"size"`
	Params    int64      `json:"params"`
	Backend   string     `json:"backend"`
	Threads   int        `json:"threads"`
	MaxBatch  int        `json:"n_batch"`
	KVType    string     `json:"type_kv"`
	CPU       string     `json:"cpu,omitempty"`
	Cores     int        `json:"cores"`
	LoadStart [3]float64 `json:"loadavg_start"` // 1, 5 and 15-minute load averages
	LoadEnd   [3]float64 `json:"loadavg_end"`
	// the weight bytes a decode step reads and the device's measured read
	// bandwidth (Report's)
	DecodeBytes int64   `json:"decode_bytes"`
	Bandwidth   float64 `json:"read_bandwidth,omitempty"`
	Test
}

// Rows flattens the report, one row per test.
func (r *Report) Rows() []Row {
	out := make([]Row, len(r.Tests))
	for i, t := range r.Tests {
		out[i] = Row{Model: r.Model, File: r.File, Size: r.Size, Params: r.Params, Backend: r.Backend, Threads: r.Threads,
			MaxBatch: r.MaxBatch, KVType: r.KVType, CPU: r.CPU, Cores: r.Cores, LoadStart: r.LoadAvg[0], LoadEnd: r.LoadAvg[1],
			DecodeBytes: r.DecodeBytes, Bandwidth: r.Bandwidth, Test: t}
	}
	return out
}

// Run times m with cfg. The tests share one runner; each run starts from an
// empty KV cache.
func Run(ctx context.Context, m *exec.Model, path string, cfg Config) (*Report, error) {
	if cfg.Prompt < 0 || cfg.Gen < 0 || cfg.Depth < 0 || cfg.Reps < 0 || cfg.Threads < 0 {
		return nil, fmt.Errorf("bench: negative count in %+v", cfg)
	}
	if cfg.Prompt == 0 && cfg.Gen == 0 {
		return nil, fmt.Errorf("bench: nothing to run (-p and -n are both 0)")
	}
	reps := max(cfg.Reps, 1)
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	batch := cfg.MaxBatch
	if batch <= 0 {
		batch = min(max(cfg.Prompt, cfg.Depth, 8), 512)
	}
	ctxLen := max(cfg.Prompt, cfg.Depth+cfg.Gen, 9)
	kvType, err := exec.ParseKVType(cfg.KVType)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep := &Report{File: path, Threads: threads, KVType: kvType, Cores: runtime.NumCPU(), CPU: cpuName()}
	rep.Model, rep.Size, rep.Params = Describe(m.Src)
	rep.DecodeBytes = DecodeBytes(m)
	rep.LoadAvg[0] = loadAvg()

	r, backend, err := devices.NewRunner(m, cfg.Devices, exec.Options{Threads: threads, MaxBatch: batch, Context: ctxLen, Tune: cfg.Tune, Mmap: cfg.Mmap, KVType: kvType})
	if err != nil {
		return nil, err
	}
	rep.Backend = backend
	defer r.Close()
	rep.MaxBatch = min(batch, ctxLen)
	vocab := m.Weights[embedWeight(m)].Dims[1]
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6a69746c6c6d))
	toks := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(rng.Int64N(vocab))
		}
		return t
	}
	prompt, depth, gen := toks(cfg.Prompt), toks(cfg.Depth), toks(cfg.Gen)

	// Warm-up: a short prefill and a decode step touch every weight (page
	// cache, TLB) and start the workers.
	r.Truncate(0)
	if _, err := r.Forward(toks(min(8, ctxLen-1))); err != nil {
		return nil, err
	}
	if _, err := r.Forward(toks(1)); err != nil {
		return nil, err
	}
	// With tuning on, the tests' shapes are measured (or read from the
	// cache) here, outside the timed runs.
	for range cfg.Tune.Rounds() {
		if cfg.Prompt > 0 {
			r.Truncate(0)
			if _, err := r.Forward(prompt); err != nil {
				return nil, err
			}
		}
		if cfg.Gen > 0 {
			if r.Pos() >= r.Context() {
				r.Truncate(0)
			}
			if _, err := r.Forward(gen[:1]); err != nil {
				return nil, err
			}
		}
	}

	if cfg.Prompt > 0 {
		t := Test{Name: "pp" + strconv.Itoa(cfg.Prompt), Prompt: cfg.Prompt}
		for i := range reps {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r.Truncate(0)
			start := time.Now()
			if _, err := r.Forward(prompt); err != nil {
				return nil, err
			}
			t.add(float64(cfg.Prompt) / time.Since(start).Seconds())
			if cfg.Progress != nil {
				cfg.Progress(t.Name, i, t.Samples[i])
			}
		}
		rep.Tests = append(rep.Tests, t.done())
	}
	if cfg.Gen > 0 {
		t := Test{Name: "tg" + strconv.Itoa(cfg.Gen), Gen: cfg.Gen, Depth: cfg.Depth}
		if cfg.Depth > 0 {
			t.Name += " @ d" + strconv.Itoa(cfg.Depth)
		}
		for i := range reps {
			r.Truncate(0)
			if cfg.Depth > 0 {
				if _, err := r.Forward(depth); err != nil {
					return nil, err
				}
			}
			start := time.Now()
			for j := range gen {
				if j%16 == 0 {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
				}
				if _, err := r.Forward(gen[j : j+1]); err != nil {
					return nil, err
				}
			}
			t.add(float64(cfg.Gen) / time.Since(start).Seconds())
			if cfg.Progress != nil {
				cfg.Progress(t.Name, i, t.Samples[i])
			}
		}
		rep.Tests = append(rep.Tests, t.done())
	}
	rep.LoadAvg[1] = loadAvg()
	if bm, ok := r.(bandwidthMeter); ok && cfg.Gen > 0 {
		bw, err := bm.ReadBandwidth()
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		rep.Bandwidth = bw
	}
	return rep, nil
}

func (t *Test) add(tps float64) { t.Samples = append(t.Samples, tps) }

func (t Test) done() Test {
	var sum, ss float64
	for _, s := range t.Samples {
		sum += s
		t.Best = max(t.Best, s)
	}
	t.Mean = sum / float64(len(t.Samples))
	for _, s := range t.Samples {
		ss += (s - t.Mean) * (s - t.Mean)
	}
	if len(t.Samples) > 1 {
		t.SD = math.Sqrt(ss / float64(len(t.Samples)-1))
	}
	return t
}

// embedWeight is the index of the token embedding among m's weights.
func embedWeight(m *exec.Model) int {
	for i, w := range m.Weights {
		if w.GGUF == "token_embd.weight" {
			return i
		}
	}
	return 0
}

// Describe names a model as llama-bench does ("<arch> <size> <file type>")
// and sums its tensors' bytes and elements.
func Describe(src weights.Source) (name string, size, params int64) {
	counts := map[string]int64{}
	for _, t := range src.Tensors() {
		size += t.Size
		params += t.Elements()
		if len(t.Dims) > 1 {
			counts[t.Type.String()] += t.Elements()
		}
	}
	md := src.Meta()
	arch, _ := md.String("general.architecture")
	label, ok := md.String("general.size_label")
	if !ok || label == "" {
		label = FormatCount(params, "")
	}
	ft := ""
	if v, ok := md.Uint("general.file_type"); ok {
		ft = FileTypeName(v)
	} else { // no file type: the type holding most of the 2D weights
		var most int64
		for k, n := range counts {
			if n > most || (n == most && k < ft) {
				ft, most = k, n
			}
		}
	}
	return strings.TrimSpace(arch + " " + label + " " + ft), size, params
}

// FileTypeName is llama.cpp's llama_model_ftype_name for general.file_type.
func FileTypeName(ft uint64) string {
	names := map[uint64]string{
		0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
		10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
		14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium", 18: "Q6_K",
		19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small", 22: "IQ3_XS - 3.3 bpw",
		23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw",
		27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw",
		31: "IQ1_M - 1.75 bpw", 32: "BF16", 36: "TQ1_0 - 1.69 bpw", 37: "TQ2_0 - 2.06 bpw", 38: "MXFP4 MoE",
	}
	if s, ok := names[ft]; ok {
		return s
	}
	return "ftype " + strconv.FormatUint(ft, 10)
}

// FormatCount writes n with a K, M or B suffix and two decimals ("1.24 B"
// with sep " ", "1.24B" with sep "").
func FormatCount(n int64, sep string) string {
	switch f := float64(n); {
	case n >= 1e9:
		return strconv.FormatFloat(f/1e9, 'f', 2, 64) + sep + "B"
	case n >= 1e6:
		return strconv.FormatFloat(f/1e6, 'f', 2, 64) + sep + "M"
	case n >= 1e3:
		return strconv.FormatFloat(f/1e3, 'f', 2, 64) + sep + "K"
	}
	return strconv.FormatInt(n, 10)
}

// FormatSize writes b bytes in MiB or GiB with two decimals, as llama-bench.
func FormatSize(b int64) string {
	if b >= 1<<30 {
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 2, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 2, 64) + " MiB"
}

// Table writes the report as llama-bench's markdown table, t/s being the
// best run, then a line on the host and its load.
func (r *Report) Table(w io.Writer) error {
	head := []string{"model", "size", "params", "backend", "threads", "test", "t/s (best)", "mean ± sd"}
	right := []bool{false, true, true, false, true, true, true, true}
	rows := [][]string{head}
	for _, t := range r.Tests {
		rows = append(rows, []string{r.Model, FormatSize(r.Size), FormatCount(r.Params, " "), r.Backend, strconv.Itoa(r.Threads),
			t.Name, strconv.FormatFloat(t.Best, 'f', 2, 64), fmt.Sprintf("%.2f ± %.2f", t.Mean, t.SD)})
	}
	width := make([]int, len(head))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if right[i] {
				c = pad + c
			} else {
				c += pad
			}
			b.WriteString("| " + c + " ")
		}
		b.WriteString("|\n")
	}
	line(head)
	for i := range head {
		d := strings.Repeat("-", width[i])
		if right[i] {
			d = d[1:] + ":"
		}
		b.WriteString("| " + d + " ")
	}
	b.WriteString("|\n")
	for _, row := range rows[1:] {
		line(row)
	}
	n := 0
	if len(r.Tests) > 0 {
		n = len(r.Tests[0].Samples)
	}
	fmt.Fprintf(&b, "\n%s, %d cores; best of %d runs after a warm-up, batch %d, KV cache %s; load average %.2f %.2f %.2f at the start, %.2f %.2f %.2f at the end\n",
		r.CPU, r.Cores, n, r.MaxBatch, orF16(r.KVType), r.LoadAvg[0][0], r.LoadAvg[0][1], r.LoadAvg[0][2], r.LoadAvg[1][0], r.LoadAvg[1][1], r.LoadAvg[1][2])
	for _, t := range r.Tests {
		if t.Gen == 0 || r.DecodeBytes == 0 {
			continue
		}
		rate := float64(r.DecodeBytes) * t.Best
		fmt.Fprintf(&b, "%s reads %s of weights a token: %.1f GB/s", t.Name, FormatSize(r.DecodeBytes), rate/1e9)
		if r.Bandwidth > 0 {
			fmt.Fprintf(&b, ", %.1f%% of the %.1f GB/s the device reads (measured)", 100*rate/r.Bandwidth, r.Bandwidth/1e9)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cpuName is the CPU's brand string.
func cpuName() string {
	if s := strings.TrimSpace(cpuid.CPU.BrandName); s != "" {
		return s
	}
	return runtime.GOARCH + " CPU"
}

// loadAvg reads /proc/loadavg (zeros where there is none).
func loadAvg() (l [3]float64) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	for i, f := range strings.Fields(string(b)) {
		if i >= 3 {
			break
		}
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}

// orF16 names an unset cache type by its default.
func orF16(kvType string) string {
	if kvType == "" {
		return exec.KVF16
	}
	return kvType
}
