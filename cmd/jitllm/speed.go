package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	rtdevices "github.com/jitllm/jitllm/runtime/devices"
	"io"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/bench"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "speed MODEL [-p 512] [-n 128] [-r 2] [-d 0] [-devices cpu] [-threads N] [-tune quick] [-cache-type f16] [-mmap] [-json]",
		Short: "measure prefill and decode speed, as llama-bench does",
		Long: `speed times MODEL (.gguf or .jlm): prefill (pp: one forward of -p tokens) and
decode (tg: -n single-token forwards), each the best of -r runs after a warm-up,
with random token ids. It prints a llama-bench style table, or with -json one
object per test with the same fields.

  -p N         prompt tokens of the prefill test (0 skips it)
  -n N         tokens of the decode test (0 skips it)
  -d N         start the decode test after an untimed prefill of N tokens
               (default 0: from an empty cache, as llama-bench's tg)
  -r N         runs of each test; the best counts
  -b N         most tokens in one forward (default min(-p, 512))
  -devices D   cpu, cuda:N, auto, or a list to split over (cpu,cuda:0; cuda:0,cuda:1)
  -threads N   worker threads (0 = one per CPU)
  -tune M      kernel tuning: off (defaults), quick (default: a few
               candidates per matmul shape, measured on first use and cached
               in the user cache dir; on CUDA the decode mat-vecs' shapes)
               or full (a wider search)
  -cache-type T
               KV cache type for K and V: f16 (default) or q8_0 (half the
               memory, as llama.cpp's -ctk/-ctv q8_0; CPU runner)
  -mmap        CPU: read the weights from the file's memory mapping (the
               page cache) as llama.cpp does by default, instead of copying
               them into RAM when they fit in half of what is free
  -json        JSON instead of the table`,
		DisableFlagsInUseLine: true,
		DisableFlagParsing:    true,
		RunE: func(c *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(commandContext(c), os.Interrupt)
			defer stop()
			err := runSpeed(ctx, c.OutOrStdout(), c.ErrOrStderr(), args)
			if errors.Is(err, flag.ErrHelp) {
				return c.Help()
			}
			return err
		},
	})
}

func runSpeed(ctx context.Context, w, log io.Writer, args []string) error {
	var bf benchFlags
	fs := newBenchFlagSet("speed", &bf)
	var cfg bench.Config
	fs.IntVar(&cfg.Prompt, "p", 512, "prompt tokens")
	fs.IntVar(&cfg.Gen, "n", 128, "generated tokens")
	fs.IntVar(&cfg.Depth, "d", 0, "decode depth")
	fs.IntVar(&cfg.Reps, "r", 2, "runs")
	fs.IntVar(&cfg.MaxBatch, "b", 0, "batch")
	devices := fs.String("devices", "cpu", "backend")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := bf.check(); err != nil {
		return err
	}
	cfg.Threads, cfg.Tune, cfg.Mmap, cfg.KVType = bf.threads, bf.tune, bf.mmap, bf.kvType
	if len(pos) != 1 {
		return fmt.Errorf("speed takes one MODEL, got %d arguments (see jitllm speed -h)", len(pos))
	}
	if _, _, err := rtdevices.Parse(*devices); err != nil {
		return err
	}
	cfg.Devices = *devices
	if cfg.Prompt < 0 || cfg.Gen < 0 || cfg.Depth < 0 || cfg.Reps < 1 || cfg.Threads < 0 || cfg.MaxBatch < 0 {
		return fmt.Errorf("-p, -n, -d, -b and -threads must be ≥ 0 and -r ≥ 1")
	}
	if bf.verbose {
		cfg.Progress = func(test string, run int, tps float64) {
			fmt.Fprintf(log, "%s run %d: %.2f t/s\n", test, run+1, tps)
		}
	}
	src, err := weights.Open(pos[0])
	if err != nil {
		return err
	}
	defer src.Close()
	m, err := exec.Load(src)
	if err != nil {
		return err
	}
	rep, err := bench.Run(ctx, m, pos[0], cfg)
	if err != nil {
		return err
	}
	if bf.json {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep.Rows())
	}
	return rep.Table(w)
}
