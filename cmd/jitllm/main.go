// Command jitllm is the command-line front end: convert, inspect, run, chat,
// synth, speed, batch, capabilities and doctor. It holds no logic the server
// also needs; each subcommand lives in its own file.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

var root = &cobra.Command{
	Use:           "jitllm",
	Short:         "jitllm runs large language models from GGUF or .jlm files",
	SilenceUsage:  true,
	SilenceErrors: true,
	Version:       version,
}

func main() {
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "jitllm:", err)
		os.Exit(1)
	}
}
