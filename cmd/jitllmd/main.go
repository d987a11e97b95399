// Command jitllmd is the server. For now it only reports its version; the
// OpenAI- and Anthropic-compatible API arrives with the server work.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/cobra"
)

var version = "dev"

func main() {
	root := &cobra.Command{
		Use:           "jitllmd",
		Short:         "jitllmd serves models over HTTP",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "jitllmd %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	})
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "jitllmd:", err)
		os.Exit(1)
	}
}
