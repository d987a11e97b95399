package ptx

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// ptxas rejects any non-ASCII byte, comments included.
func TestModuleIsASCII(t *testing.T) {
	text, err := Module(allKernels(), Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(text); i++ {
		if text[i] >= utf8.RuneSelf {
			t.Fatalf("byte %d of the module is %#x (line %q)", i, text[i], lineAt(text, i))
		}
	}
}

func lineAt(s string, i int) string {
	lo, hi := i, i
	for lo > 0 && s[lo-1] != '\n' {
		lo--
	}
	for hi < len(s) && s[hi] != '\n' {
		hi++
	}
	return s[lo:hi]
}

// The driver refuses a module that defines an entry twice (stop 39: two
// counted folds of one name, apart only in the staging they drop): Module
// says so before the driver does.
func TestModuleRefusesTwoKernelsOfOneName(t *testing.T) {
	ks := allKernels()
	twin := *ks[0]
	if _, err := Module([]*kernel.Kernel{ks[0], &twin}, Target{SM: 90}); err == nil || !strings.Contains(err.Error(), "two kernels named "+ks[0].Name) {
		t.Fatalf("two kernels named %s rendered into one module: %v", ks[0].Name, err)
	}
}
