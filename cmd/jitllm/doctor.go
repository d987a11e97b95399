package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/discover"
)

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "doctor [-json] [-ctx N] [-batch N] [-cache-type f16] [MODEL]",
		Short: "check this host's CPU, GPUs and memory, and whether MODEL can run here",
		Long: `doctor reports the host (OS, CPU model and features, cores, memory) and every
device found (the CPU; CUDA GPUs through the driver; Vulkan and Metal when
their loaders are there). Given MODEL, it checks the model's architecture and
quant types against each backend and estimates the memory a run needs against
the memory free. Every problem comes with a next action. The exit status is
non-zero when MODEL cannot run.

  -json      the same as JSON (stable schema, "schema": 1)
  -ctx N     context the estimate assumes (0 = the model's, at most 4096)
  -batch N   rows per step the estimate assumes (0 = 512)
  -cache-type T
             KV cache type the estimate assumes: f16 (default) or q8_0`,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			err := runDoctor(c.OutOrStdout(), args)
			if errors.Is(err, flag.ErrHelp) {
				return c.Help()
			}
			return err
		},
	})
}

// errCannotRun is doctor's failure when the requested model cannot run; the
// report has already said why.
var errCannotRun = errors.New("the model cannot run on this host (see the problems above)")

func runDoctor(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print JSON")
	var opt discover.Options
	fs.IntVar(&opt.Context, "ctx", 0, "context size")
	fs.IntVar(&opt.MaxBatch, "batch", 0, "batch rows")
	fs.StringVar(&opt.KVType, "cache-type", "f16", cacheTypeHelp)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if opt.KVType, err = parseCacheType(opt.KVType); err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("doctor takes at most one MODEL, got %d arguments", len(pos))
	}
	model := ""
	if len(pos) == 1 {
		model = pos[0]
	}
	r := discover.Doctor(model, opt)
	r.Version = version
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printDoctor(w, r)
	}
	if !r.OK {
		return errCannotRun
	}
	return nil
}

func printDoctor(w io.Writer, r discover.Report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	h := r.Host
	p("host      %s/%s, %s, %d cores (%d physical)\n", h.OS, h.Arch, h.CPU, h.LogicalCores, h.PhysicalCores)
	p("memory    %s total, %s available (%s)\n", discover.GiB(int64(h.MemTotal)), discover.GiB(int64(h.MemAvailable)), h.MemSource)
	p("features  %s\n", wrapList(h.Features, 10, "          "))
	p("backends  %s\n", strings.Join(r.Backends, ", "))
	p("\ndevices\n")
	for _, d := range r.Devices {
		extra := ""
		if d.ComputeCapability != "" {
			extra += ", compute " + d.ComputeCapability
		}
		if d.Driver != "" {
			extra += ", driver " + d.Driver
		}
		be := "no backend in this build"
		if len(d.Backends) > 0 {
			be = "backend " + strings.Join(d.Backends, ", ")
		}
		p("  %-8s %s: %s total, %s free%s; %s\n", d.ID, d.Name, discover.GiB(int64(d.MemTotal)), discover.GiB(int64(d.MemFree)), extra, be)
	}
	for _, a := range r.APIs {
		state := "not found"
		if a.Present {
			state = "found"
			if a.Driver != "" {
				state += ", driver " + a.Driver
			}
			state += fmt.Sprintf(", %d devices", len(a.Devices))
		}
		p("  %-8s %s (%s)\n", a.Name, state, a.Library)
	}
	if m := r.Model; m != nil {
		p("\nmodel     %s\n", m.Path)
		if m.Architecture != "" {
			p("  architecture %s (%s), %s, %.1fM parameters\n", m.Architecture, orDash(m.Family), m.Format, float64(m.Parameters)/1e6)
		}
		for _, q := range m.QuantTypes {
			p("  %-7s %4d tensors %10s  %s\n", q.Type, q.Tensors, discover.GiB(q.Bytes), orNoBackend(q.Backend))
		}
		for _, k := range m.CPUKernels {
			rows := "decode"
			if k.Rows != "1" {
				rows = "batches"
			}
			p("  cpu %-7s %-7s %-18s %-10s tile %d×%d, %d weights\n", k.Type, rows, k.Order, k.ISA, k.Tile[0], k.Tile[1], k.Tensors)
		}
		if e := m.Estimate; e != nil {
			p("  memory at context %d, batch %d: %s = weights %s + KV cache %s (%s) + activations %s + overhead %s\n",
				e.Context, e.MaxBatch, discover.GiB(e.Total), discover.GiB(e.Weights), discover.GiB(e.KV), e.KVType,
				discover.GiB(e.Activations+e.Graph), discover.GiB(e.Overhead))
		}
		for _, f := range m.Fits {
			verdict := "can run"
			if !f.CanRun {
				verdict = "cannot run"
			}
			p("  on %-6s (%s backend): %s; needs %s, %s free\n", f.Device, f.Backend, verdict, discover.GiB(f.NeedBytes), discover.GiB(int64(f.FreeBytes)))
		}
	}
	if len(r.Problems) > 0 {
		p("\nproblems\n")
		for _, pr := range r.Problems {
			p("  %-7s %s\n          → %s\n", pr.Severity, pr.Message, pr.Action)
		}
	}
	if r.Model != nil {
		if r.OK {
			p("\nok: %s can run here\n", r.Model.Path)
		} else {
			p("\nno: %s cannot run here\n", r.Model.Path)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func orNoBackend(b []string) string {
	if len(b) == 0 {
		return "no backend computes it"
	}
	return strings.Join(b, ", ")
}

func wrapList(ss []string, per int, indent string) string {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			if i%per == 0 {
				b.WriteString("\n" + indent)
			} else {
				b.WriteString(" ")
			}
		}
		b.WriteString(s)
	}
	return b.String()
}
