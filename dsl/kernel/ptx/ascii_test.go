package ptx

import (
	"testing"
	"unicode/utf8"
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
