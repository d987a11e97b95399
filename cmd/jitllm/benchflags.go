package main

import (
	"flag"
	"io"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/tune"
)

// benchFlags are the flags speed and batch share: worker threads, CPU
// kernel tuning and the output form.
type benchFlags struct {
	threads int
	tune    tune.Mode
	json    bool
	verbose bool
	mmap    bool
	kvType  string // --cache-type, checked by check
}

// newBenchFlagSet is a flag set named name with the shared bench flags
// registered into bf (tuning defaults to quick, as the runner's does).
func newBenchFlagSet(name string, bf *benchFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&bf.threads, "threads", 0, "threads")
	fs.IntVar(&bf.threads, "t", 0, "threads")
	bf.tune = tune.Quick
	fs.Var(&bf.tune, "tune", "kernel tuning: CPU block sizes and workers, CUDA decode mat-vec shapes (measured on first use, cached)")
	fs.BoolVar(&bf.json, "json", false, "JSON output")
	fs.BoolVar(&bf.verbose, "v", false, "print each run")
	fs.BoolVar(&bf.mmap, "mmap", false, "weights stay mapped")
	fs.StringVar(&bf.kvType, "cache-type", exec.KVF16, cacheTypeHelp)
	return fs
}

// check validates the parsed flags.
func (bf *benchFlags) check() (err error) {
	bf.kvType, err = parseCacheType(bf.kvType)
	return err
}
