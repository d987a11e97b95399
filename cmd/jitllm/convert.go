package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/convert"
	"github.com/jitllm/jitllm/runtime/jlm"
)

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "convert IN.gguf|HF-DIR OUT.jlm [-f] [-sha256] [-type f32|f16|bf16]",
		Short: "convert a GGUF file or a Hugging Face checkpoint into a .jlm container (docs/format.md)",
		Long: `convert copies a GGUF file's metadata and tensors, byte for byte, into a .jlm
container: tensors 4096-aligned, each with a CRC-32C, experts addressable one by one.
Given a Hugging Face checkpoint directory (config.json, model.safetensors or its
shards, tokenizer.json, tokenizer_config.json) it writes what the GGUF of
llama.cpp's convert_hf_to_gguf.py would give: GGUF's keys and tensor names, the
weights in their own float type (F32, F16, BF16).
The output appears only when complete; an interrupted conversion leaves nothing.

  -f        overwrite OUT if it exists
  -sha256   also record the source's SHA-256 (jlm.source.sha256); slower
  -type T   a checkpoint's matrices as f32, f16 or bf16 (llama.cpp's --outtype; default:
            each its own; both runners multiply all three, the CPU runner bf16 slowly)`,
		DisableFlagsInUseLine: true,
		DisableFlagParsing:    true, // std flag syntax: -f, -sha256 (or --sha256), anywhere
		RunE: func(c *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(commandContext(c), os.Interrupt)
			defer stop()
			err := runConvert(ctx, c.OutOrStdout(), isCharDevice(os.Stdout), args)
			if errors.Is(err, flag.ErrHelp) {
				return c.Help()
			}
			return err
		},
	})
}

func commandContext(c *cobra.Command) context.Context {
	if ctx := c.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// runConvert is the convert command; tty selects a redrawn progress bar over
// plain progress lines.
func runConvert(ctx context.Context, w io.Writer, tty bool, args []string) error {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	force := fs.Bool("f", false, "overwrite the output")
	sha := fs.Bool("sha256", false, "record the source's SHA-256")
	mtype := fs.String("type", "", "a checkpoint's matrices as f32, f16 or bf16")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("convert takes IN.gguf (or a Hugging Face checkpoint directory) and OUT.jlm, got %d arguments (see jitllm convert -h)", len(pos))
	}
	in, out := pos[0], pos[1]
	if st, err := os.Stat(in); err == nil && !st.IsDir() && strings.HasSuffix(in, ".safetensors") {
		in = filepath.Dir(in) // a checkpoint's weights: the directory is the checkpoint
	}
	p := newConvProgress(w, tty)
	start := time.Now()
	var warnings []string
	warn := func(s string) { warnings = append(warnings, s) }
	opts := convert.Options{Force: *force, SourceSHA256: *sha, Progress: p.update, Warn: warn, MatrixType: *mtype}
	if st, err := os.Stat(in); err == nil && st.IsDir() && !convert.IsHFCheckpoint(in) {
		return fmt.Errorf("%s is a directory without a config.json: not a Hugging Face checkpoint", in)
	}
	if convert.IsHFCheckpoint(in) {
		if *sha {
			return errors.New("-sha256 records a single source file's hash; a Hugging Face checkpoint is a directory")
		}
		err = convert.ConvertHF(ctx, in, out, opts)
	} else if *mtype != "" {
		return errors.New("-type converts a Hugging Face checkpoint's matrices; a GGUF's tensors are copied as they are")
	} else {
		err = convert.Convert(ctx, in, out, opts)
	}
	for _, s := range warnings {
		fmt.Fprintln(w, "warning:", s)
	}
	p.finish()
	if err != nil {
		return err
	}
	f, err := jlm.Open(out)
	if err != nil {
		return fmt.Errorf("checking the output: %w", err)
	}
	defer f.Close()
	secs := time.Since(start).Seconds()
	fmt.Fprintf(w, "wrote %s: %d tensors, %s in %.1fs (%.0f MB/s)\n", out, len(f.Tensors), humanBytes(f.Size), secs, float64(f.Size)/1e6/max(secs, 1e-9))
	return nil
}

// parseInterspersed parses std-flag-style flags placed before, between or
// after the positional arguments, which it returns.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil // after "--" everything is positional
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// isCharDevice reports whether f is a character device (a terminal).
func isCharDevice(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// convProgress draws conversion progress: a bar redrawn in place on a terminal,
// else one line per tenth.
type convProgress struct {
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
	tenth int64
	drawn bool
}

func newConvProgress(w io.Writer, tty bool) *convProgress {
	return &convProgress{w: w, tty: tty, start: time.Now(), tenth: -1}
}

func (p *convProgress) update(done, total int64) {
	if total <= 0 {
		return
	}
	now := time.Now()
	rate := float64(done) / 1e6 / max(now.Sub(p.start).Seconds(), 1e-9)
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond && done != total {
			return
		}
		p.last = now
		const width = 30
		n := int(done * width / total)
		fmt.Fprintf(p.w, "\r[%s%s] %3d%% %s / %s %5.0f MB/s", strings.Repeat("#", n), strings.Repeat(".", width-n),
			done*100/total, humanBytes(done), humanBytes(total), rate)
		p.drawn = true
		return
	}
	if t := done * 10 / total; t != p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "converted %3d%% (%s of %s, %.0f MB/s)\n", t*10, humanBytes(done), humanBytes(total), rate)
	}
}

func (p *convProgress) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// humanBytes renders a byte count with a decimal unit.
func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
