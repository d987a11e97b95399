// Command kernels renders every kernel of kernels/ops as Go source into the
// -out directory (kernels/cpugen): one zz_<group>.go per group and zz_rt.go.
// It imports only the IR, its Go renderer and the kernels, never the
// generated package, so a stale or broken generated file cannot stop it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/jitllm/jitllm/dsl/kernel/gosrc"
	"github.com/jitllm/jitllm/kernels/ops"
)

func main() {
	out := flag.String("out", ".", "directory to write")
	pkg := flag.String("pkg", "cpugen", "package name of the generated files")
	flag.Parse()
	if err := gosrc.WriteDir(*out, *pkg, ops.Groups()); err != nil {
		fmt.Fprintln(os.Stderr, "gen/kernels:", err)
		os.Exit(1)
	}
}
