// Command jitllmd is the server: it loads models and serves them over an
// OpenAI- and Anthropic-compatible HTTP API (docs/server.md).
//
//	jitllmd serve -addr localhost:4242 -models DIR -load F.gguf -id NAME -threads N -devices cpu|cuda|auto
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/devices"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/server"
	"github.com/jitllm/jitllm/server/control"
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
	root.AddCommand(&cobra.Command{
		Use:   "serve [flags]",
		Short: "load models and serve the HTTP API (flags: serve -h)",
		// Go-style flags (-addr as well as --addr), parsed by package flag.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return serve(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	})
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "jitllmd:", err)
		os.Exit(1)
	}
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "localhost:4242", "listen address")
	dir := fs.String("models", "", "load every .gguf and .jlm file in this directory (id: the file name without extension)")
	var loads, ids list
	fs.Var(&loads, "load", "load this model file (repeatable)")
	fs.Var(&ids, "id", "id of the matching -load (repeatable; default: the file name without extension)")
	threads := fs.Int("threads", 0, "worker threads per session (0 = one per CPU)")
	mmapW := fs.Bool("mmap", false, "keep the weights in the file's memory mapping (as llama.cpp's default) instead of copying them into RAM when they fit")
	ctxLen := fs.Int("ctx", 0, "context length per session (0 = the model's, at most 4096)")
	maxSessions := fs.Int("max-sessions", 1, "concurrent sessions (KV caches) per model")
	maxQueue := fs.Int("max-queue", 64, "requests that may wait for a session per model (more: 429)")
	lookup := fs.Int("lookup", 0, "speculative decoding by prompt lookup on CPU sessions: guess that the last n tokens (n from this down to 1) go on as they did before; 0 = off")
	draftMax := fs.Int("draft-max", 8, "with -lookup, most tokens guessed a step")
	queueWait := fs.Duration("queue-wait", 30*time.Second, "longest wait for a session (then 503)")
	grace := fs.Duration("grace", 30*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may finish before they are cancelled")
	devs := fs.String("devices", "cpu", "where models run: "+devices.Names+" (cuda: one GPU session per -max-sessions slot, all sharing one copy of the weights)")
	cacheType := fs.String("cache-type", exec.KVF16, "KV cache type for K and V of every session: f16 or q8_0; q8_0 halves its memory, as llama.cpp's -ctk/-ctv q8_0 (CPU sessions)")
	ctl := fs.Bool("control", true, "serve the control plane (Connect API: models, devices, sessions) on the same address")
	var loadDirs list
	fs.Var(&loadDirs, "load-dir", "the control plane may load model files from under this directory (repeatable; -models DIR and the directories of -load files are included)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if len(ids) > len(loads) {
		return errors.New("serve: more -id than -load flags")
	}
	type spec struct{ id, path string }
	var specs []spec
	if *dir != "" {
		ents, err := os.ReadDir(*dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || (ext != ".gguf" && ext != ".jlm") {
				continue
			}
			specs = append(specs, spec{strings.TrimSuffix(e.Name(), ext), filepath.Join(*dir, e.Name())})
		}
		sort.Slice(specs, func(i, j int) bool { return specs[i].id < specs[j].id })
	}
	for i, p := range loads {
		id := strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		if i < len(ids) {
			id = ids[i]
		}
		specs = append(specs, spec{id, p})
	}
	if len(specs) == 0 && (!*ctl || len(loadDirs) == 0) {
		return errors.New("serve: no models: give -models DIR or -load FILE (or -load-dir DIR to load them through the control plane)")
	}
	dev, err := devices.Resolve(*devs)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	kvType, err := exec.ParseKVType(*cacheType)
	if err != nil || *cacheType == "" {
		return fmt.Errorf("serve: -cache-type %q: want %s", *cacheType, exec.KVTypes)
	}
	if dev == "cuda" && kvType != exec.KVF16 {
		return fmt.Errorf("serve: the CUDA runner keeps an f16 KV cache; -cache-type %s runs on cpu (-devices cpu)", kvType)
	}
	if *lookup < 0 || *draftMax < 1 || *draftMax > generate.MaxDraft {
		return fmt.Errorf("serve: -lookup %d, -draft-max %d: want -lookup ≥ 0 and -draft-max from 1 to %d", *lookup, *draftMax, generate.MaxDraft)
	}
	if *dir != "" {
		loadDirs = append(loadDirs, *dir)
	}
	for _, p := range loads {
		loadDirs = append(loadDirs, filepath.Dir(p))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	srv := server.New(server.Config{Threads: *threads, Mmap: *mmapW, Context: *ctxLen, MaxSessions: *maxSessions, MaxQueue: *maxQueue, QueueWait: *queueWait,
		Devices: *devs, KVType: kvType, Lookup: *lookup, DraftMax: *draftMax, LoadDirs: loadDirs, Logger: log})
	defer srv.Close(context.Background())
	if *ctl {
		control.Register(srv)
	}
	for _, sp := range specs {
		m, err := generate.Open(sp.path)
		if err != nil {
			return err
		}
		if err := srv.AddModel(sp.id, m); err != nil {
			m.Close()
			return err
		}
		log.Info("loaded", "id", sp.id, "path", sp.path, "devices", *devs)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// Cancelling base cancels every in-flight request's context.
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs := &http.Server{Handler: srv.Handler(), BaseContext: func(net.Listener) context.Context { return base }, ReadHeaderTimeout: 10 * time.Second}
	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	fmt.Fprintf(stdout, "jitllmd: serving %s on http://%s\n", strings.Join(srv.Models(), ", "), ln.Addr())

	select {
	case err := <-errc:
		return err
	case <-sig.Done():
	}
	stop()
	log.Info("shutting down: no new connections; waiting for in-flight requests", "grace", *grace)
	sctx, scancel := context.WithTimeout(context.Background(), *grace)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("grace period over: cancelling in-flight requests")
		cancel()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		hs.Shutdown(cctx)
		hs.Close()
	}
	cancel()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := srv.Close(cctx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
