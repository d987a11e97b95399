// Package server is jitllm's HTTP server: OpenAI-compatible
// (/v1/models, /v1/completions, /v1/chat/completions) and
// Anthropic-compatible (/v1/messages) endpoints over the models it holds,
// each request on a session (one KV cache) taken from the model's pool, and
// Prometheus metrics on /metrics. docs/server.md describes the API.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/grammar"
	"github.com/jitllm/jitllm/runtime/template"
)

// Config shapes a server.
type Config struct {
	Threads     int           // worker goroutines per session; 0 = one per CPU
	Mmap        bool          // CPU weights stay in the file's mapping (exec.Options.Mmap)
	Context     int           // KV positions per session; 0 = the model's default
	MaxSessions int           // sessions per model (concurrent requests); 0 = 1
	MaxQueue    int           // requests waiting for a session per model; 0 = 64
	QueueWait   time.Duration // longest wait for a session; 0 = 30s
	Devices     string        // where models run: cpu, cuda, cuda:0, auto; "" = cpu
	KVType      string        // KV cache type of every session (exec.Options.KVType): f16 or q8_0 (CPU only); "" = f16
	Lookup      int           // speculative decoding by prompt lookup (CPU sessions): the longest n-gram matched; 0 = off
	DraftMax    int           // with Lookup, most tokens drafted a step; 0 = 8
	LoadDirs    []string      // the control plane loads model files only from under these
	Logger      *slog.Logger  // nil = slog.Default()
	Now         func() time.Time
}

// Server serves the models added to it. Its Handler is safe for
// concurrent use.
type Server struct {
	cfg     Config
	mu      sync.RWMutex
	models  map[string]*model
	metrics *metrics
	mux     *http.ServeMux
	log     *slog.Logger
	named   sessionTable // named sessions (sessions.go)
}

type model struct {
	id      string
	m       *generate.Model
	tmpl    *template.Template // nil: the plain fallback format
	tmplErr error
	pool    *pool
	created int64
	bos     string
	eos     string

	// The control plane's hold on the entry (registry.go): life ends when
	// the entry is unloaded or re-placed (after the grace period), which
	// cancels the generations running on it; next is the entry that
	// replaced it.
	life    context.Context
	end     context.CancelFunc
	running atomic.Int32
	next    atomic.Pointer[model]
	prev    <-chan struct{} // closed when the entry this one replaced has drained
	kvTok   int64           // KV bytes per cached position of one sequence
	mem     MemoryInfo

	vocabOnce sync.Once // the masking trie of constrained decoding (tools.go), built on first need
	vocab     *grammar.Vocab
}

// New returns a server with no models.
func New(cfg Config) *Server {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 1
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 64
	}
	if cfg.DraftMax <= 0 {
		cfg.DraftMax = 8
	}
	cfg.DraftMax = min(cfg.DraftMax, generate.MaxDraft)
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, models: map[string]*model{}, metrics: newMetrics(), log: cfg.Logger}
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, s.instrument(rt.name, rt.handler(s)))
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	s.mux = mux
	return s
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Registry is the Prometheus registry the server reports to.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// AddModel serves m under id. The server owns m from now on and closes it
// in Close.
func (s *Server) AddModel(id string, m *generate.Model) error {
	device, err := s.resolveDevice("")
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := s.addModel(id, m, device, 0); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// setup reads the model's chat template and special tokens.
func (e *model) setup(s *Server) {
	m := e.m
	if src, ok := m.Src.Meta().String("tokenizer.chat_template"); ok && src != "" {
		e.tmpl, e.tmplErr = template.Compile(src)
		if e.tmplErr != nil {
			s.log.Warn("chat template does not compile; chat requests will fail", "model", e.id, "err", e.tmplErr)
		}
	}
	if b := m.Tok.BOS(); b >= 0 {
		e.bos = m.Tok.Token(b)
	}
	if t := m.Tok.EOS(); t >= 0 {
		e.eos = m.Tok.Token(t)
	}
}

// Models lists the served ids, sorted.
func (s *Server) Models() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]string, 0, len(s.models))
	for id := range s.models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (s *Server) model(id string) (*model, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.models[id]
	return m, ok
}

// Close waits for sessions in use to come back (or ctx to end), then
// closes every session and model. Stop the HTTP server first.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	models := s.models
	s.models = map[string]*model{}
	s.mu.Unlock()
	var errs []error
	for _, m := range models {
		s.dropSessions(m)
		if err := m.pool.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.id, err))
		}
		if err := m.m.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) instrument(endpoint string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(endpoint, fmt.Sprint(sw.status)).Inc()
	}
}
