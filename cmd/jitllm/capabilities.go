package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/capabilities"
)

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "capabilities [-json]",
		Short: "list the model families, backends, quant types and API endpoints of this build",
		Long: `capabilities prints what this build of jitllm can run, as go generate found it in
the code: model families and their architectures, each backend with the quant
types its kernels cover and the ISA variants compiled in, and the API endpoints
with the request fields each accepts or refuses (docs/capabilities.md is the
same table).

  -json   the same as JSON (what GET /v1/capabilities serves)`,
		DisableFlagParsing: true,
		RunE: func(c *cobra.Command, args []string) error {
			err := runCapabilities(c.OutOrStdout(), args)
			if errors.Is(err, flag.ErrHelp) {
				return c.Help()
			}
			return err
		},
	})
}

func runCapabilities(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("capabilities", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("capabilities takes no arguments, got %q", pos)
	}
	if *asJSON {
		_, err = w.Write(capabilities.JSON())
		return err
	}
	_, err = io.WriteString(w, capabilities.Markdown(capabilities.Get(), ""))
	return err
}
