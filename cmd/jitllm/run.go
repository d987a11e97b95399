package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/sample"
	"github.com/jitllm/jitllm/runtime/tune"
)

// genFlags are the flags run and chat share.
type genFlags struct {
	n         int
	threads   int
	ctx       int
	samp      sample.Params
	noSpecial bool
	special   bool
	verbose   bool
	devices   string
	tune      tune.Mode
	mmap      bool
	cacheType string // the KV cache's type (exec.Options.KVType)

	draft     string // a draft model's file (speculative decoding)
	draftMax  int    // tokens drafted a step
	lookup    int    // longest n-gram prompt lookup matches (speculative decoding without a draft model)
	draftDone func() // closes the draft model and its session
}

func (f *genFlags) register(c *cobra.Command) {
	f.samp = sample.DefaultParams()
	fl := c.Flags()
	fl.IntVarP(&f.n, "n", "n", 128, "tokens to generate (0 = until end of text or a full context)")
	fl.IntVarP(&f.threads, "threads", "t", 0, "worker threads (0 = one per CPU)")
	fl.IntVarP(&f.ctx, "ctx", "c", 0, "context size in tokens (0 = the model's, at most 4096)")
	fl.Float32Var(&f.samp.Temperature, "temp", f.samp.Temperature, "temperature (0 = greedy)")
	fl.IntVar(&f.samp.TopK, "top-k", f.samp.TopK, "keep the k most likely tokens (0 = off)")
	fl.Float32Var(&f.samp.TopP, "top-p", f.samp.TopP, "nucleus sampling mass (1 = off)")
	fl.Float32Var(&f.samp.MinP, "min-p", f.samp.MinP, "drop tokens less likely than min-p × the best (0 = off)")
	fl.Float32Var(&f.samp.RepeatPenalty, "repeat-penalty", f.samp.RepeatPenalty, "penalty for recent tokens (1 = off)")
	fl.IntVar(&f.samp.RepeatLastN, "repeat-last-n", f.samp.RepeatLastN, "how many recent tokens the penalties look at (-1 = all)")
	fl.Float32Var(&f.samp.FrequencyPenalty, "frequency-penalty", 0, "subtract count × this from each seen token")
	fl.Float32Var(&f.samp.PresencePenalty, "presence-penalty", 0, "subtract this from each seen token")
	fl.Uint64Var(&f.samp.Seed, "seed", f.samp.Seed, "random seed")
	fl.BoolVar(&f.noSpecial, "no-bos", false, "do not add the vocabulary's BOS/EOS tokens to the prompt")
	fl.BoolVar(&f.special, "special", false, "parse special-token text (e.g. <s>) in the prompt")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print timings to stderr")
	fl.StringVar(&f.devices, "devices", "cpu", "where to run: cpu, cuda:N, auto, or a list to split the model over (cpu,cuda:0; cuda:0,cuda:1)")
	fl.BoolVar(&f.mmap, "mmap", false, "keep the weights in the file's memory mapping (as llama.cpp's default) instead of copying them into RAM when they fit")
	f.tune = tune.Quick
	fl.StringVar(&f.draft, "model-draft", "", "speculative decoding: a smaller model of the same vocabulary drafts tokens that one step of MODEL checks (on the devices of MODEL)")
	fl.IntVar(&f.draftMax, "draft-max", 8, "speculative decoding: most tokens drafted a step")
	fl.IntVar(&f.lookup, "lookup", 0, "speculative decoding without a draft model: guess that the sequence's last n tokens (n from this down to 1) go on as they did before (prompt lookup; 0 = off)")
	fl.StringVar(&f.cacheType, "cache-type", exec.KVF16, cacheTypeHelp)
	fl.Var(&f.tune, "tune", "kernel tuning (CPU block sizes and workers, CUDA decode mat-vec shapes): off (defaults), quick (a few candidates, measured on first use, cached) or full (a wider search)")
}

// cacheTypeHelp is --cache-type's help, on every command that takes it.
const cacheTypeHelp = "KV cache type for K and V: f16 or q8_0; q8_0 halves its memory, as llama.cpp's -ctk/-ctv q8_0 (CPU runner)"

// parseCacheType checks a --cache-type value.
func parseCacheType(s string) (string, error) {
	t, err := exec.ParseKVType(s)
	if err != nil || s == "" {
		return "", fmt.Errorf("--cache-type %q: want %s", s, exec.KVTypes)
	}
	return t, nil
}

func (f *genFlags) request(prompt string) generate.Request {
	return generate.Request{Prompt: prompt, MaxTokens: f.n, Sampling: f.samp, NoSpecial: f.noSpecial, ParseSpecial: f.special}
}

func (f *genFlags) open(path string) (*generate.Model, *generate.Session, error) {
	if err := f.samp.Validate(); err != nil {
		return nil, nil, err
	}
	kvType, err := parseCacheType(f.cacheType)
	if err != nil {
		return nil, nil, err
	}
	m, err := generate.Open(path)
	if err != nil {
		return nil, nil, err
	}
	opt := exec.Options{Threads: f.threads, Context: f.ctx, Tune: f.tune, Mmap: f.mmap, KVType: kvType}
	s, err := m.NewSessionOn(f.devices, opt)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	if err := f.speculate(m, s, opt); err != nil {
		s.Close()
		m.Close()
		return nil, nil, err
	}
	return m, s, nil
}

// speculate gives s the drafter the flags ask for.
func (f *genFlags) speculate(m *generate.Model, s *generate.Session, opt exec.Options) error {
	f.draftDone = func() {}
	var d generate.Drafter
	switch {
	case f.draft != "" && f.lookup > 0:
		return fmt.Errorf("-model-draft and -lookup are two ways to draft: choose one")
	case f.lookup > 0:
		d = generate.LookupDrafter{MinN: 1, MaxN: f.lookup}
	case f.draft != "":
		dm, err := generate.Open(f.draft)
		if err != nil {
			return err
		}
		opt.Context = s.Context()
		ds, err := dm.NewSessionOn(f.devices, opt)
		if err != nil {
			dm.Close()
			return err
		}
		f.draftDone = func() { ds.Close(); dm.Close() }
		if d, err = generate.NewModelDrafter(ds, m); err != nil {
			f.draftDone()
			return err
		}
	default:
		return nil
	}
	if err := s.Speculate(d, f.draftMax); err != nil {
		f.draftDone()
		return err
	}
	return nil
}

func report(w io.Writer, r *generate.Result) {
	pf := float64(len(r.PromptTokens)) / r.Prefill.Seconds()
	dc := float64(len(r.Tokens)) / r.Decode.Seconds()
	fmt.Fprintf(w, "\nprompt %d tokens in %v (%.1f tok/s), generated %d in %v (%.1f tok/s), stop: %s\n",
		len(r.PromptTokens), r.Prefill.Round(1e5), pf, len(r.Tokens), r.Decode.Round(1e5), dc, r.StopReason)
	if r.Drafted > 0 {
		fmt.Fprintf(w, "speculative: %d of %d drafted tokens kept (%.0f%%)\n", r.Accepted, r.Drafted, 100*float64(r.Accepted)/float64(r.Drafted))
	}
}

func init() {
	var f genFlags
	var prompt string
	var noPrompt bool
	c := &cobra.Command{
		Use:   "run MODEL -p PROMPT",
		Short: "generate text from a prompt (MODEL is a .gguf or .jlm file)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, s, err := f.open(args[0])
			if err != nil {
				return err
			}
			defer m.Close()
			defer s.Close()
			defer f.draftDone()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			if !noPrompt {
				out.WriteString(prompt) // as llama.cpp's CLI does
			}
			res, err := s.Generate(ctx, f.request(prompt), func(text string) error {
				out.WriteString(text)
				return out.Flush()
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(out)
			if f.verbose {
				out.Flush()
				report(cmd.ErrOrStderr(), res)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&prompt, "prompt", "p", "", "the prompt")
	c.Flags().BoolVar(&noPrompt, "no-display-prompt", false, "print only the generated text")
	f.register(c)
	root.AddCommand(c)
}

func init() {
	var f genFlags
	c := &cobra.Command{
		Use:   "chat MODEL",
		Short: "an interactive loop: each line you type is continued by the model",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, s, err := f.open(args[0])
			if err != nil {
				return err
			}
			defer m.Close()
			defer s.Close()
			defer f.draftDone()
			in := bufio.NewScanner(cmd.InOrStdin())
			in.Buffer(make([]byte, 1<<20), 1<<20)
			out := cmd.OutOrStdout()
			// Until chat templates arrive, each turn continues the text so far.
			var history strings.Builder
			for {
				fmt.Fprint(out, "> ")
				if !in.Scan() {
					fmt.Fprintln(out)
					return in.Err()
				}
				line := in.Text()
				if line == "/exit" || line == "/quit" {
					return nil
				}
				history.WriteString(line)
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
				req := f.request(history.String())
				req.Truncate = true
				res, err := s.Generate(ctx, req, func(text string) error {
					history.WriteString(text)
					_, err := io.WriteString(out, text)
					return err
				})
				stop()
				if err != nil && ctx.Err() == nil {
					return err
				}
				fmt.Fprintln(out)
				history.WriteString("\n")
				if f.verbose && res != nil {
					report(cmd.ErrOrStderr(), res)
				}
			}
		},
	}
	f.register(c)
	root.AddCommand(c)
}
