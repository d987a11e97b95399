package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/bench"
	"github.com/jitllm/jitllm/runtime/synth"
)

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "synth --like NAME --type TYPE [--seed N] [--layers N] -o OUT.gguf",
		Short: "write a synthetic GGUF: a real model's shapes with seeded random weights",
		Long: `synth writes a GGUF with the architecture, shapes and metadata of a real model
and seeded random weights (matrices N(0, 0.02²), norms ≈ 1), quantized by jitllm
with llama-quantize's per-tensor mix, and a dummy SentencePiece-style vocabulary.
Speed does not depend on the weights' values, so it stands in for the real
model in benchmarks (jitllm speed, llama-bench). The output appears only when
complete.

  --like NAME   ` + strings.Join(synth.Presets(), ", ") + `
  --type TYPE   q4_k_m, q8_0, q4_0 or f16
  --seed N      random seed (default 1); the same options give the same bytes
  --layers N    keep only N blocks (quick tests)
  -o OUT.gguf   the output (replaced if it exists)`,
		DisableFlagsInUseLine: true,
		DisableFlagParsing:    true,
		RunE: func(c *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(commandContext(c), os.Interrupt)
			defer stop()
			err := runSynth(ctx, c.OutOrStdout(), args)
			if errors.Is(err, flag.ErrHelp) {
				return c.Help()
			}
			return err
		},
	})
}

// synthVocab, when > 0, replaces the preset's vocabulary size (tests: the
// embedding of a 128K vocabulary is most of a one-block file).
var synthVocab int

func runSynth(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("synth", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	like := fs.String("like", "", "preset")
	typ := fs.String("type", "", "file type")
	seed := fs.Uint64("seed", 1, "seed")
	layers := fs.Int("layers", 0, "blocks to keep")
	out := fs.String("o", "", "output")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("synth takes no positional arguments, got %q (the output is -o)", pos)
	case *like == "":
		return fmt.Errorf("synth needs --like (one of %s)", strings.Join(synth.Presets(), ", "))
	case *typ == "":
		return fmt.Errorf("synth needs --type (q4_k_m, q8_0, q4_0 or f16)")
	case *out == "":
		return fmt.Errorf("synth needs -o OUT.gguf")
	case *layers < 0:
		return fmt.Errorf("--layers %d is negative", *layers)
	}
	shape, err := synth.Like(*like)
	if err != nil {
		return err
	}
	ft, err := synth.ParseFileType(*typ)
	if err != nil {
		return err
	}
	if *layers > shape.Layers {
		return fmt.Errorf("--layers %d: %s has %d", *layers, shape.Name, shape.Layers)
	}
	if synthVocab > 0 {
		shape.Vocab = synthVocab
	}
	start := time.Now()
	next := 0.1
	opt := synth.Options{Shape: shape, Type: ft, Seed: *seed, Layers: *layers, Progress: func(done, total int64) {
		if f := float64(done) / float64(max(total, 1)); f >= next && f < 1 {
			fmt.Fprintf(w, "synth %3.0f%%  %s / %s  %.1fs\n", 100*f, bench.FormatSize(done), bench.FormatSize(total), time.Since(start).Seconds())
			for next <= f {
				next += 0.1
			}
		}
	}}
	sum, err := synth.Write(ctx, *out, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s: %s %s %s, %d tensors, %s params, %s, in %.1fs\n", sum.Path, shape.Name, ft,
		layersNote(*layers, shape.Layers), sum.Tensors, bench.FormatCount(sum.Params, " "), bench.FormatSize(sum.Bytes), time.Since(start).Seconds())
	return nil
}

func layersNote(layers, all int) string {
	if layers == 0 || layers == all {
		return fmt.Sprintf("(%d layers)", all)
	}
	return fmt.Sprintf("(%d of %d layers)", layers, all)
}
