package nofma_test

import (
	"testing"

	"github.com/jitllm/jitllm/gen/nofma"
	"golang.org/x/tools/go/analysis/analysistest"
)

func TestAnalyzer(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), nofma.Analyzer, "a")
}
