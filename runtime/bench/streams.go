package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/sample"
	"github.com/jitllm/jitllm/runtime/tune"
)

// Bounds of a multi-stream measurement: every allocation it makes (KV for
// streams × (prompt + gen) positions, the prompts, the token records) is
// sized by these.
const (
	MaxStreams       = 64
	MaxStreamTokens  = 8192    // -p and -n each
	MaxStreamReps    = 100     // -r
	MaxStreamsKVRows = 1 << 16 // streams × (prompt + gen) positions of one engine
)

// StreamsConfig chooses a multi-stream measurement: for each count in
// Streams, that many sessions of one generate.Engine (as jitllmd's pool runs
// them) prefill a prompt each and decode Gen tokens each, at the same time.
type StreamsConfig struct {
	Streams []int     // stream counts to measure, in order
	Prompt  int       // prompt tokens per stream (≥ 1)
	Gen     int       // tokens each stream generates (≥ 2: the decode phase is what follows the first)
	Reps    int       // runs per stream count; the best decode rate counts (0 = 1)
	Threads int       // worker threads (0 = one per CPU)
	Seed    uint64    // the random prompts' seed
	Tune    tune.Mode // kernel tuning (exec.Options.Tune)
	Mmap    bool      // CPU weights stay in the file's mapping (exec.Options.Mmap)
	KVType  string    // KV cache type (exec.Options.KVType); "" = f16
	// Prompts, when set, are the streams' prompts (stream i takes
	// Prompts[i % len]), each cut to Prompt tokens; else stream i's prompt is
	// Prompt random ids of the vocabulary, seeded by Seed and i.
	Prompts [][]int32
	// Progress, when set, is told each run's aggregate decode rate.
	Progress func(streams, run int, decodeTPS float64)
}

// StreamsRun is one stream count's figures, those of its best run (by
// aggregate decode rate).
type StreamsRun struct {
	Streams int `json:"streams"`
	Prompt  int `json:"n_prompt"` // per stream
	Gen     int `json:"n_gen"`    // per stream
	// DecodeTPS is the aggregate decode rate over the decode phase, from
	// the moment every stream has its first token (all prompts are in) to
	// the last stream's last token: the tokens sampled in it over its wall
	// time. With one stream: n-1 tokens after the first.
	DecodeTPS float64 `json:"decode_ts"`
	PerStream float64 `json:"decode_ts_per_stream"` // DecodeTPS / Streams
	// PrefillTPS is every stream's prompt tokens over the time until the
	// last stream had its first token.
	PrefillTPS float64 `json:"prefill_ts"`
	TTFTMean   float64 `json:"ttft_ms_mean"` // time to first token, over the streams
	TTFTMax    float64 `json:"ttft_ms_max"`
	// Ratio is DecodeTPS over the one-stream run's (0 when 1 is not among
	// the counts measured).
	Ratio float64 `json:"ratio_to_1"`
	// RowsPerStep is the decode phase's mean rows per engine step: how
	// many streams shared each weight read.
	RowsPerStep float64   `json:"decode_rows_per_step"`
	Samples     []float64 `json:"samples_decode_ts"` // every run's DecodeTPS
	// Tokens are each stream's generated tokens in the best run (greedy).
	Tokens [][]int32 `json:"-"`
	// PromptTokens are each stream's prompt.
	PromptTokens [][]int32 `json:"-"`
}

// StreamsReport is a model's multi-stream figures with what they were
// measured on.
type StreamsReport struct {
	Model     string       `json:"model"`
	File      string       `json:"file"`
	Size      int64        `json:"size"`
	Params    int64        `json:"params"`
	Backend   string       `json:"backend"`
	Threads   int          `json:"threads"`
	KVType    string       `json:"type_kv"`
	CPU       string       `json:"cpu,omitempty"`
	Cores     int          `json:"cores"`
	Reps      int          `json:"reps"`
	LoadStart [3]float64   `json:"loadavg_start"` // 1, 5 and 15-minute load averages
	LoadEnd   [3]float64   `json:"loadavg_end"`
	Runs      []StreamsRun `json:"runs"`
}

// CheckStreams validates cfg's counts against the bounds above.
func CheckStreams(cfg StreamsConfig) error {
	if len(cfg.Streams) == 0 {
		return errors.New("no stream counts to measure")
	}
	if len(cfg.Streams) > MaxStreams {
		return fmt.Errorf("%d stream counts; at most %d", len(cfg.Streams), MaxStreams)
	}
	for _, s := range cfg.Streams {
		if s < 1 || s > MaxStreams {
			return fmt.Errorf("a stream count of %d is outside 1..%d", s, MaxStreams)
		}
	}
	switch {
	case cfg.Prompt < 1 || cfg.Prompt > MaxStreamTokens:
		return fmt.Errorf("prompt tokens %d outside 1..%d", cfg.Prompt, MaxStreamTokens)
	case cfg.Gen < 2 || cfg.Gen > MaxStreamTokens:
		return fmt.Errorf("generated tokens %d outside 2..%d (the decode phase follows the first token)", cfg.Gen, MaxStreamTokens)
	case cfg.Reps < 0 || cfg.Reps > MaxStreamReps:
		return fmt.Errorf("runs %d outside 1..%d", cfg.Reps, MaxStreamReps)
	case cfg.Threads < 0 || cfg.Threads > 4096:
		return fmt.Errorf("threads %d outside 0..4096", cfg.Threads)
	}
	if _, err := exec.ParseKVType(cfg.KVType); err != nil {
		return err
	}
	for _, s := range cfg.Streams {
		if s*(cfg.Prompt+cfg.Gen) > MaxStreamsKVRows {
			return fmt.Errorf("%d streams × (%d + %d) tokens is %d KV positions; at most %d", s, cfg.Prompt, cfg.Gen, s*(cfg.Prompt+cfg.Gen), MaxStreamsKVRows)
		}
	}
	for i, p := range cfg.Prompts {
		if len(p) < cfg.Prompt {
			return fmt.Errorf("prompt %d has %d tokens, fewer than the %d asked (lower -p)", i+1, len(p), cfg.Prompt)
		}
	}
	return nil
}

// RunStreams measures m with cfg: per stream count, one engine, a warm-up
// run, then cfg.Reps timed runs, each from empty KV caches. Sampling is
// greedy and end of text is ignored, so every stream generates cfg.Gen
// tokens.
func RunStreams(ctx context.Context, m *generate.Model, path string, cfg StreamsConfig) (*StreamsReport, error) {
	if err := CheckStreams(cfg); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if mc := m.Exec.ContextLength(); mc > 0 && cfg.Prompt+cfg.Gen > mc {
		return nil, fmt.Errorf("bench: %d prompt + %d generated tokens exceed the model's context of %d", cfg.Prompt, cfg.Gen, mc)
	}
	reps := max(cfg.Reps, 1)
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	rep := &StreamsReport{File: path, Backend: "CPU", Threads: threads, KVType: orF16(cfg.KVType), Cores: runtime.NumCPU(), CPU: cpuName(), Reps: reps}
	rep.Model, rep.Size, rep.Params = Describe(m.Src)
	rep.LoadStart = loadAvg()

	most := 0
	for _, s := range cfg.Streams {
		most = max(most, s)
	}
	prompts := streamPrompts(m, cfg, most)
	one := 0.0
	for _, s := range cfg.Streams {
		run, err := runStreams(ctx, m, cfg, threads, reps, prompts[:s])
		if err != nil {
			return nil, err
		}
		if s == 1 && one == 0 {
			one = run.DecodeTPS
		}
		rep.Runs = append(rep.Runs, run)
	}
	if one > 0 {
		for i := range rep.Runs {
			rep.Runs[i].Ratio = rep.Runs[i].DecodeTPS / one
		}
	}
	rep.LoadEnd = loadAvg()
	return rep, nil
}

// streamPrompts makes n distinct, deterministic prompts of cfg.Prompt
// tokens: cfg.Prompts cut to length, or random ids that are no end of text
// token (stream i's seeded by cfg.Seed and i, so adding streams keeps the
// others' prompts).
func streamPrompts(m *generate.Model, cfg StreamsConfig, n int) [][]int32 {
	out := make([][]int32, n)
	if len(cfg.Prompts) > 0 {
		for i := range out {
			out[i] = cfg.Prompts[i%len(cfg.Prompts)][:cfg.Prompt]
		}
		return out
	}
	vocab := int64(m.Exec.VocabSize())
	for i := range out {
		rng := rand.New(rand.NewPCG(cfg.Seed, 0x6a69746c6c6d+uint64(i)))
		p := make([]int32, cfg.Prompt)
		for j := range p {
			for {
				p[j] = int32(rng.Int64N(vocab))
				if !m.Tok.IsEOG(p[j]) && p[j] != m.Tok.BOS() {
					break
				}
			}
		}
		out[i] = p
	}
	return out
}

// streamTimes is what one stream of one run recorded.
type streamTimes struct {
	at     []time.Time // when each token was sampled
	tokens []int32
	err    error
}

// oneRun is what one run of all the streams recorded.
type oneRun struct {
	start   time.Time // the streams were let go
	all     time.Time // the last stream's first token: from here every stream decodes
	st0     generate.EngineStats
	st1     generate.EngineStats // at the end
	streams []streamTimes
}

func runStreams(ctx context.Context, m *generate.Model, cfg StreamsConfig, threads, reps int, prompts [][]int32) (StreamsRun, error) {
	s := len(prompts)
	run := StreamsRun{Streams: s, Prompt: cfg.Prompt, Gen: cfg.Gen}
	// One step can carry every stream's prompt, as the server's default
	// batch of 512 rows does for its usual prompts.
	e, err := m.NewEngine(exec.Options{Threads: threads, Context: cfg.Prompt + cfg.Gen, MaxBatch: min(max(s*cfg.Prompt, s), 512), Tune: cfg.Tune, Mmap: cfg.Mmap, KVType: cfg.KVType}, s)
	if err != nil {
		return run, err
	}
	defer e.Close()
	sessions := make([]*generate.Session, s)
	for i := range sessions {
		sessions[i] = e.Session(m, i)
	}
	empty := &generate.Snapshot{Layout: e.KVLayout()}
	p := sampleGreedy()
	once := func(gen int) (*oneRun, error) {
		for _, ss := range sessions { // no prefix of the last run is reused
			if err := ss.Restore(empty); err != nil {
				return nil, err
			}
		}
		o := &oneRun{streams: make([]streamTimes, s)}
		var firsts atomic.Int32
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range sessions {
			t := &o.streams[i]
			t.at = make([]time.Time, 0, gen)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				req := generate.Request{Tokens: prompts[i], MaxTokens: gen, Sampling: p, IgnoreEOS: true}
				res, err := sessions[i].GenerateSteps(ctx, req, generate.StepOptions{}, func(st generate.Step) error {
					if st.Token < 0 {
						return nil
					}
					now := time.Now()
					if len(t.at) == 0 && int(firsts.Add(1)) == s {
						o.all, o.st0 = now, e.Stats() // read after wg.Wait
					}
					if len(t.at) < gen {
						t.at = append(t.at, now)
					}
					return nil
				})
				t.err = err
				if res != nil {
					t.tokens = res.Tokens
				}
			}()
		}
		o.start = time.Now()
		close(gate)
		wg.Wait()
		o.st1 = e.Stats()
		for i, t := range o.streams {
			if t.err != nil {
				return nil, fmt.Errorf("stream %d: %w", i, t.err)
			}
			if len(t.tokens) != gen || len(t.at) != gen {
				return nil, fmt.Errorf("stream %d generated %d tokens, want %d", i, len(t.tokens), gen)
			}
		}
		return o, nil
	}
	// Warm-up: page in the weights, start the workers and, with tuning
	// on, measure (or read from the cache) the runs' shapes.
	for range max(cfg.Tune.Rounds(), 1) {
		if _, err := once(min(cfg.Gen, 4)); err != nil {
			return run, err
		}
	}
	for r := range reps {
		if err := ctx.Err(); err != nil {
			return run, err
		}
		o, err := once(cfg.Gen)
		if err != nil {
			return run, err
		}
		// The decode phase runs from the moment every stream has its first
		// token (all prompts are in) to the last token; its tokens are
		// those sampled after that moment.
		last := o.all
		var ttft, ttftMax time.Duration
		decoded := 0
		for _, t := range o.streams {
			d := t.at[0].Sub(o.start)
			ttft += d
			ttftMax = max(ttftMax, d)
			for _, at := range t.at {
				if at.After(o.all) {
					decoded++
				}
			}
			last = maxTime(last, t.at[len(t.at)-1])
		}
		if decoded == 0 || !last.After(o.all) {
			return run, fmt.Errorf("%d streams: no token after the last stream's first (n %d too small)", s, cfg.Gen)
		}
		tps := float64(decoded) / last.Sub(o.all).Seconds()
		run.Samples = append(run.Samples, tps)
		if cfg.Progress != nil {
			cfg.Progress(s, r, tps)
		}
		if tps < run.DecodeTPS {
			continue
		}
		run.DecodeTPS, run.PerStream = tps, tps/float64(s)
		run.PrefillTPS = float64(s*cfg.Prompt) / o.all.Sub(o.start).Seconds()
		run.TTFTMean = float64(ttft.Microseconds()) / 1e3 / float64(s)
		run.TTFTMax = float64(ttftMax.Microseconds()) / 1e3
		run.RowsPerStep = 0
		if steps := o.st1.Steps - o.st0.Steps; steps > 0 {
			run.RowsPerStep = float64(o.st1.Rows-o.st0.Rows) / float64(steps)
		}
		run.Tokens = make([][]int32, s)
		run.PromptTokens = prompts
		for i, t := range o.streams {
			run.Tokens[i] = t.tokens
		}
	}
	return run, nil
}

func sampleGreedy() sample.Params {
	p := sample.DefaultParams()
	p.Temperature = 0
	return p
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Table writes the report as a markdown table, one row per stream count,
// then a line on the host and its load.
func (r *StreamsReport) Table(w io.Writer) error {
	head := []string{"model", "backend", "threads", "streams", "p", "n", "prefill t/s", "TTFT ms (mean/max)", "decode t/s", "per stream", "× 1 stream", "rows/step"}
	rows := [][]string{head}
	for _, t := range r.Runs {
		ratio := "-"
		if t.Ratio > 0 {
			ratio = strconv.FormatFloat(t.Ratio, 'f', 2, 64) + "×"
		}
		rows = append(rows, []string{r.Model, r.Backend, strconv.Itoa(r.Threads), strconv.Itoa(t.Streams), strconv.Itoa(t.Prompt), strconv.Itoa(t.Gen),
			strconv.FormatFloat(t.PrefillTPS, 'f', 2, 64), fmt.Sprintf("%.1f / %.1f", t.TTFTMean, t.TTFTMax),
			strconv.FormatFloat(t.DecodeTPS, 'f', 2, 64), strconv.FormatFloat(t.PerStream, 'f', 2, 64), ratio,
			strconv.FormatFloat(t.RowsPerStep, 'f', 2, 64)})
	}
	width := make([]int, len(head))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for k, row := range rows {
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i < 2 {
				c += pad
			} else {
				c = pad + c
			}
			b.WriteString("| " + c + " ")
		}
		b.WriteString("|\n")
		if k == 0 {
			for i := range head {
				d := strings.Repeat("-", width[i])
				if i >= 2 {
					d = d[1:] + ":"
				}
				b.WriteString("| " + d + " ")
			}
			b.WriteString("|\n")
		}
	}
	fmt.Fprintf(&b, "\n%s, %d cores; best of %d runs after a warm-up, one engine per stream count, KV cache %s; load average %.2f %.2f %.2f at the start, %.2f %.2f %.2f at the end\n",
		r.CPU, r.Cores, r.Reps, orF16(r.KVType), r.LoadStart[0], r.LoadStart[1], r.LoadStart[2], r.LoadEnd[0], r.LoadEnd[1], r.LoadEnd[2])
	_, err := io.WriteString(w, b.String())
	return err
}
