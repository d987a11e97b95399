package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/bench"
	"github.com/jitllm/jitllm/runtime/generate"
)

// maxPromptsFile bounds what -prompts reads.
const maxPromptsFile = 16 << 20

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "batch MODEL [-streams 1,8] [-p 64] [-n 64] [-r 2] [-threads N] [-tune quick] [-cache-type f16] [-mmap] [-json] [-prompts FILE]",
		Short: "measure aggregate decode speed of concurrent streams (continuous batching)",
		Long: `batch runs, for each stream count S of -streams, S concurrent sessions on one
batching engine (as jitllmd's session pool does): each prefills its own prompt
of -p tokens and decodes -n tokens (greedy, end of text ignored). Per S it
reports the aggregate decode rate (the tokens sampled once every stream has
its first token, over the wall time from then to the last token), the
prefill rate, the time to first token and the ratio to S=1, from the best of
-r runs after a warm-up (by decode rate).

  -streams L   comma-separated stream counts (1..64)
  -p N         prompt tokens per stream
  -n N         tokens each stream generates (≥ 2)
  -r N         runs per stream count; the best decode rate counts
  -threads N   worker threads (0 = one per CPU)
  -tune M      kernel tuning (CPU blocks, CUDA mat-vec shapes): off, quick (default) or full
  -prompts F   one prompt per line (stream i takes line i, cycling), each
               tokenized and cut to -p tokens; default: random token ids,
               distinct per stream
  -seed N      seed of the random prompts
  -cache-type T
               KV cache type for K and V: f16 (default) or q8_0 (half the
               memory, as llama.cpp's -ctk/-ctv q8_0)
  -mmap        CPU: weights stay in the file's memory mapping (see speed -h)
  -json        JSON instead of the table`,
		DisableFlagsInUseLine: true,
		DisableFlagParsing:    true,
		RunE: func(c *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(commandContext(c), os.Interrupt)
			defer stop()
			err := runBatch(ctx, c.OutOrStdout(), c.ErrOrStderr(), args)
			if errors.Is(err, flag.ErrHelp) {
				return c.Help()
			}
			return err
		},
	})
}

// batchConfig parses batch's flags; the model path is returned apart.
func batchConfig(args []string) (string, string, bench.StreamsConfig, bool, bool, error) {
	var bf benchFlags
	fs := newBenchFlagSet("batch", &bf)
	var cfg bench.StreamsConfig
	streams := fs.String("streams", "1,8", "stream counts")
	fs.IntVar(&cfg.Prompt, "p", 64, "prompt tokens")
	fs.IntVar(&cfg.Gen, "n", 64, "generated tokens")
	fs.IntVar(&cfg.Reps, "r", 2, "runs")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "prompt seed")
	prompts := fs.String("prompts", "", "prompts file")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return "", "", cfg, false, false, err
	}
	if err := bf.check(); err != nil {
		return "", "", cfg, false, false, err
	}
	cfg.Threads, cfg.Tune, cfg.Mmap, cfg.KVType = bf.threads, bf.tune, bf.mmap, bf.kvType
	if len(pos) != 1 {
		return "", "", cfg, false, false, fmt.Errorf("batch takes one MODEL, got %d arguments (see jitllm batch -h)", len(pos))
	}
	if cfg.Streams, err = parseStreams(*streams); err != nil {
		return "", "", cfg, false, false, err
	}
	if cfg.Reps < 1 {
		return "", "", cfg, false, false, fmt.Errorf("-r %d: at least one run", cfg.Reps)
	}
	if err := bench.CheckStreams(cfg); err != nil {
		return "", "", cfg, false, false, err
	}
	return pos[0], *prompts, cfg, bf.json, bf.verbose, nil
}

// parseStreams reads "1,8" into distinct counts in 1..bench.MaxStreams.
func parseStreams(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > bench.MaxStreams {
			return nil, fmt.Errorf("-streams %q: %q is not a stream count in 1..%d", s, f, bench.MaxStreams)
		}
		if seen[n] {
			return nil, fmt.Errorf("-streams %q: %d is listed twice", s, n)
		}
		if len(out) == bench.MaxStreams {
			return nil, fmt.Errorf("-streams %q: at most %d counts", s, bench.MaxStreams)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

// readPrompts tokenizes the non-empty lines of path (at most what the
// largest stream count uses), with the vocabulary's BOS.
func readPrompts(m *generate.Model, path string, want int) ([][]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxPromptsFile {
		return nil, fmt.Errorf("-prompts %s: %d bytes; at most %d", path, st.Size(), maxPromptsFile)
	}
	sc := bufio.NewScanner(io.LimitReader(f, maxPromptsFile))
	sc.Buffer(make([]byte, 0, 64<<10), maxPromptsFile)
	var out [][]int32
	for line := 1; sc.Scan() && len(out) < want; line++ {
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		ids, err := m.Tok.Encode(text, true, false)
		if err != nil {
			return nil, fmt.Errorf("-prompts %s line %d: %w", path, line, err)
		}
		out = append(out, ids)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-prompts %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-prompts %s: no prompts (one per line)", path)
	}
	return out, nil
}

func runBatch(ctx context.Context, w, log io.Writer, args []string) error {
	path, promptsFile, cfg, asJSON, verbose, err := batchConfig(args)
	if err != nil {
		return err
	}
	if verbose {
		cfg.Progress = func(streams, run int, tps float64) {
			fmt.Fprintf(log, "%d streams run %d: %.2f t/s decode\n", streams, run+1, tps)
		}
	}
	m, err := generate.Open(path)
	if err != nil {
		return err
	}
	defer m.Close()
	if promptsFile != "" {
		most := 0
		for _, s := range cfg.Streams {
			most = max(most, s)
		}
		if cfg.Prompts, err = readPrompts(m, promptsFile, most); err != nil {
			return err
		}
	}
	rep, err := bench.RunStreams(ctx, m, path, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	return rep.Table(w)
}
