// Command nofma runs the nofma analyzer (see gen/nofma); -fix applies the
// suggested conversions.
package main

import (
	"github.com/jitllm/jitllm/gen/nofma"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(nofma.Analyzer) }
