package main

import (
	"os"
	"testing"
)

// The commands tune by default; the tests keep the tuning cache out of the
// user's cache directory.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jitllm-cmd-test-cache")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CACHE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
