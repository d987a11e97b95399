package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/devices"
	"github.com/jitllm/jitllm/runtime/discover"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/gpuexec"
)

// The model registry as the control plane (server/control) drives it:
// load, unload, describe and re-place models. It works on the same map the
// API handlers serve from, so a model loaded here is served at once and an
// unloaded one answers 404 from the next request on.

// Error classes of the registry; server/control maps each to a Connect code.
var (
	ErrNotFound     = errors.New("not found")
	ErrInvalid      = errors.New("invalid argument")
	ErrExists       = errors.New("already exists")
	ErrNoMemory     = errors.New("not enough memory")
	ErrPrecondition = errors.New("failed precondition")
	ErrPermission   = errors.New("permission denied")
)

// classed is an error of one of the classes above; its text is the
// message alone.
type classed struct {
	class error
	msg   string
}

func (e *classed) Error() string { return e.msg }
func (e *classed) Unwrap() error { return e.class }

func errorf(class error, format string, args ...any) error {
	return &classed{class, fmt.Sprintf(format, args...)}
}

// MaxContext bounds the context a load may ask for when the model does not
// say its trained context: one slot's KV and scores grow with it.
const MaxContext = 1 << 20

// DefaultGrace is how long an unload waits for in-flight requests when the
// caller gives no grace period.
const DefaultGrace = 30 * time.Second

// ModelInfo describes a served model.
type ModelInfo struct {
	ID, Path, Family, Device string
	QuantTypes               []string // the tensor types the graph binds, sorted
	Context                  int      // KV positions per slot
	Slots, SlotsInUse        int      // concurrent sequences, and those running now
	Sessions                 int      // named sessions (server/sessions.go)
	Blocks                   int
	Parameters               int64
	Memory                   MemoryInfo
}

// MemoryInfo is a model's memory by part, as runtime/discover estimates it
// for the plan runtime/exec (or gpuexec) makes.
type MemoryInfo struct {
	Weights, KV, Activations, Total int64
}

// BlockPlacement is where one block of a model runs.
type BlockPlacement struct{ Block, Device string }

// Placement is where a model runs, block by block. Today a model runs on
// one device, so every block names the same one.
type Placement struct {
	ModelID, Device string
	Blocks          []BlockPlacement
}

// LoadSpec is one model to load.
type LoadSpec struct {
	Path    string // a .gguf or .jlm file under one of Config.LoadDirs
	ID      string // "" = the file name without extension
	Devices string // cpu, cuda, cuda:0, auto; "" = Config.Devices
	Context int    // KV positions per slot; 0 = Config.Context or the model's
}

// UnloadResult says what an unload did to the model's work.
type UnloadResult struct {
	Cancelled int // requests still running when the grace period ended
	Sessions  int // named sessions deleted with the model
}

// Handle mounts h on the server's mux beside the API (the control plane's
// Connect handlers), counted in jitllm_requests_total as endpoint "control".
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, s.instrument("control", h.ServeHTTP))
}

// unloadedError is what a request running on a model that is unloaded (or
// re-placed) under it gets.
func unloadedError(id string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, kind: "overloaded", retryAfter: 1,
		msg: fmt.Sprintf("the model %q was unloaded or moved while this request ran; retry", id)}
}

// bind ties a generation to the model's lifetime: unloading the model
// cancels ctx once the grace period is over.
func (m *model) bind(ctx context.Context) (context.Context, func()) {
	if m.life == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.life, cancel)
	m.running.Add(1)
	return ctx, func() { m.running.Add(-1); stop(); cancel() }
}

// lifeErr turns the cancellation of an unloaded model into its answer.
func (m *model) lifeErr(err error) error {
	if err != nil && m.life != nil && m.life.Err() != nil {
		return unloadedError(m.id)
	}
	return err
}

// resolveDevice maps a -devices value to "cpu" or "cuda".
func (s *Server) resolveDevice(spec string) (string, error) {
	if spec == "" {
		spec = s.cfg.Devices
	}
	d, err := devices.Resolve(spec)
	if err != nil {
		return "", errorf(ErrInvalid, "%v", err)
	}
	return d, nil
}

// checkContext validates a requested context against the model.
func checkContext(m *generate.Model, n int) error {
	if n < 0 {
		return errorf(ErrInvalid, "context %d is negative", n)
	}
	trained := m.Exec.ContextLength()
	if trained > 0 && n > trained {
		return errorf(ErrInvalid, "context %d exceeds the model's trained context of %d", n, trained)
	}
	if n > MaxContext {
		return errorf(ErrInvalid, "context %d exceeds the limit of %d", n, MaxContext)
	}
	return nil
}

// checkKVType refuses a KV cache type the model or the device cannot keep,
// at load rather than on the first request (the CPU engine is made then).
func checkKVType(m *generate.Model, device, kvType string) error {
	if err := exec.CheckKVType(m.Exec.Graph, kvType); err != nil {
		return errorf(ErrInvalid, "%v", err)
	}
	if t, _ := exec.ParseKVType(kvType); device == "cuda" && t != exec.KVF16 {
		return errorf(ErrInvalid, "the CUDA runner keeps an f16 KV cache; -cache-type %s runs on cpu", t)
	}
	return nil
}

// memoryOf estimates what the model takes on device with slots sequences
// of ctx positions (0: exec's default) and a KV cache of kvType.
func memoryOf(m *generate.Model, device string, ctx, slots int, kvType string) (MemoryInfo, error) {
	est, err := discover.EstimateMemory(m.Exec.Graph, m.Src, discover.Options{Context: ctx, KVType: kvType})
	if err != nil {
		return MemoryInfo{}, err
	}
	mi := MemoryInfo{Weights: est.Weights, KV: est.KV * int64(slots), Activations: est.Activations}
	if device == "cuda" {
		// The CUDA slots are runners sharing one upload of the weights
		// (gpuexec.Runner.Share), each with its own KV and buffers
		// (gpuexec's own plan).
		shared, own, err := gpuexec.EstimateShared(m.Exec, est.Context)
		if err != nil {
			return MemoryInfo{}, err
		}
		mi.Total = shared + own*int64(slots)
		return mi, nil
	}
	mi.Total = mi.Weights + mi.KV + mi.Activations + est.Graph
	return mi, nil
}

// checkFits refuses a load whose estimate exceeds the device's free memory.
func checkFits(mi MemoryInfo, device string) error {
	if device == "cuda" {
		api := discover.CUDA()
		if len(api.Devices) == 0 {
			return nil // NewSessionOn says why there is no device
		}
		if free := api.Devices[0].MemFree; free > 0 && uint64(mi.Total) > free {
			return errorf(ErrNoMemory, "the model needs about %s on cuda:0 and %s is free", discover.GiB(mi.Total), discover.GiB(int64(free)))
		}
		return nil
	}
	h := discover.HostInfo()
	// A CPU runner copies the weights into RAM only when they fit in half
	// of what is free (exec's resident weights), else they stay mapped from
	// the file: only what is allocated besides them must fit.
	need := mi.Total - mi.Weights
	if h.MemAvailable > 0 && need > 0 && uint64(need) > h.MemAvailable {
		return errorf(ErrNoMemory, "the model needs about %s of RAM besides its weights and %s is available", discover.GiB(need), discover.GiB(int64(h.MemAvailable)))
	}
	return nil
}

// checkID refuses ids the API could not name.
func checkID(id string) error {
	if id == "" {
		return errorf(ErrInvalid, "the model id is empty")
	}
	if len(id) > 256 {
		return errorf(ErrInvalid, "the model id is %d bytes (at most 256)", len(id))
	}
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return errorf(ErrInvalid, "the model id %q holds a space or control character", id)
		}
	}
	return nil
}

// loadPath resolves p and refuses it unless it lies under a load directory.
func (s *Server) loadPath(p string) (string, error) {
	if p == "" {
		return "", errorf(ErrInvalid, "the path is empty")
	}
	if len(s.cfg.LoadDirs) == 0 {
		return "", errorf(ErrPrecondition, "loading by path is off (start jitllmd with -models DIR or -load-dir DIR)")
	}
	if ext := filepath.Ext(p); ext != ".gguf" && ext != ".jlm" {
		return "", errorf(ErrInvalid, "%q is not a .gguf or .jlm file", p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", errorf(ErrInvalid, "%v", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, os.ErrNotExist) {
		return "", errorf(ErrNotFound, "no file %s", p)
	} else if err != nil {
		return "", errorf(ErrInvalid, "%v", err)
	}
	for _, d := range s.cfg.LoadDirs {
		dir, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			dir = r
		}
		if rel, err := filepath.Rel(dir, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", errorf(ErrPermission, "%s is outside the load directories (%s)", p, strings.Join(s.cfg.LoadDirs, ", "))
}

// LoadModel opens spec.Path and serves it under spec.ID.
func (s *Server) LoadModel(ctx context.Context, spec LoadSpec) (ModelInfo, error) {
	path, err := s.loadPath(spec.Path)
	if err != nil {
		return ModelInfo{}, err
	}
	id := spec.ID
	if id == "" {
		id = strings.TrimSuffix(filepath.Base(spec.Path), filepath.Ext(spec.Path))
	}
	if err := checkID(id); err != nil {
		return ModelInfo{}, err
	}
	if _, ok := s.model(id); ok {
		return ModelInfo{}, errorf(ErrExists, "a model with id %q is loaded (unload it first)", id)
	}
	device, err := s.resolveDevice(spec.Devices)
	if err != nil {
		return ModelInfo{}, err
	}
	if spec.Context < 0 || spec.Context > MaxContext {
		// Before opening: a request this far off says nothing about the file.
		return ModelInfo{}, errorf(ErrInvalid, "context %d is outside [0, %d]", spec.Context, MaxContext)
	}
	if err := ctx.Err(); err != nil {
		return ModelInfo{}, err
	}
	m, err := generate.Open(path)
	if err != nil {
		return ModelInfo{}, errorf(ErrInvalid, "%v", err)
	}
	m.Path = spec.Path
	if err := s.addModel(id, m, device, spec.Context); err != nil {
		m.Close()
		return ModelInfo{}, err
	}
	s.log.Info("loaded", "id", id, "path", spec.Path, "device", device)
	e, _ := s.model(id)
	return s.info(e), nil
}

// addModel checks and serves m under id on device with ctx positions per
// slot (0: Config.Context or the model's).
func (s *Server) addModel(id string, m *generate.Model, device string, ctx int) error {
	if ctx != 0 {
		// Asked for through the control plane: no more than the model was
		// trained for.
		if err := checkContext(m, ctx); err != nil {
			return err
		}
	} else if ctx = s.cfg.Context; ctx < 0 || ctx > MaxContext {
		return errorf(ErrInvalid, "context %d is outside [0, %d]", ctx, MaxContext)
	}
	if err := checkKVType(m, device, s.cfg.KVType); err != nil {
		return err
	}
	mi, err := memoryOf(m, device, ctx, s.cfg.MaxSessions, s.cfg.KVType)
	if err != nil {
		return errorf(ErrInvalid, "%v", err)
	}
	if err := checkFits(mi, device); err != nil {
		return err
	}
	e := s.newEntry(id, m, device, ctx)
	if err := e.pool.start(); err != nil {
		return errorf(ErrPrecondition, "%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.models[id]; ok {
		e.pool.close(context.Background())
		return errorf(ErrExists, "a model with id %q is loaded (unload it first)", id)
	}
	s.models[id] = e
	return nil
}

// start makes a CUDA pool's sessions at once, so a load fails (not the
// first request) when the device cannot hold them; the CPU engine is made on
// first need.
func (p *pool) start() error {
	if p.device != "cuda" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < p.max; i++ {
		// the first session uploads the weights, the rest share them
		var sess *generate.Session
		var err error
		if i > 0 {
			sess, err = p.own[0].Share()
		}
		if sess == nil {
			sess, err = p.m.NewSessionOn("cuda", p.opt)
		}
		if err == nil { // drafts checked in a verify step (docs/gpu.md)
			if err = p.speculate(sess); err != nil {
				sess.Close()
			}
		}
		if err != nil {
			for _, s := range p.own {
				s.Close()
			}
			p.own, p.idle = nil, nil
			return err
		}
		p.own = append(p.own, sess)
		p.idle = append(p.idle, sess)
	}
	return nil
}

// UnloadModel stops serving id: new requests get 404 at once, requests in
// flight may run for grace and are then cancelled, and once every slot is
// back the model's runner and file are closed.
func (s *Server) UnloadModel(id string, grace time.Duration) (UnloadResult, error) {
	s.mu.Lock()
	e, ok := s.models[id]
	if ok {
		delete(s.models, id)
	}
	s.mu.Unlock()
	if !ok {
		return UnloadResult{}, errorf(ErrNotFound, "no model %q is loaded", id)
	}
	res := UnloadResult{Sessions: s.dropSessions(e)}
	var drained bool
	res.Cancelled, drained = s.drain(e, grace)
	s.forgetMetrics(id)
	if e.prev != nil {
		select {
		case <-e.prev: // the entry it replaced has drained too
		default:
			drained = false
		}
	}
	if !drained {
		return res, fmt.Errorf("the model %q is no longer served, but some of its requests did not stop; its memory stays allocated", id)
	}
	if err := e.m.Close(); err != nil {
		return res, err
	}
	s.log.Info("unloaded", "id", id, "cancelled", res.Cancelled)
	return res, nil
}

// drain waits up to grace for e's requests, cancels those left, and closes
// its pool (not its model file: a re-placement keeps using it). It reports
// false when the pool's slots did not all come back, so nothing may close
// what they still use.
func (s *Server) drain(e *model, grace time.Duration) (cancelled int, ok bool) {
	var n atomic.Int32
	fired := make(chan struct{})
	t := time.AfterFunc(grace, func() {
		n.Store(e.running.Load())
		e.end()
		close(fired)
	})
	// Cancelled generations stop at their next token; the bound is for a
	// step that never returns.
	ctx, cancel := context.WithTimeout(context.Background(), grace+time.Minute)
	defer cancel()
	err := e.pool.close(ctx)
	if !t.Stop() {
		<-fired
	}
	e.end()
	if err != nil {
		s.log.Error("slots did not come back; the model's memory stays allocated", "id", e.id, "err", err)
		return int(n.Load()), false
	}
	return int(n.Load()), true
}

// Info describes the model id.
func (s *Server) Info(id string) (ModelInfo, error) {
	e, ok := s.model(id)
	if !ok {
		return ModelInfo{}, errorf(ErrNotFound, "no model %q is loaded", id)
	}
	return s.info(e), nil
}

// Infos describes every served model, sorted by id.
func (s *Server) Infos() []ModelInfo {
	var out []ModelInfo
	for _, id := range s.Models() {
		if e, ok := s.model(id); ok {
			out = append(out, s.info(e))
		}
	}
	return out
}

func (s *Server) info(e *model) ModelInfo {
	g := e.m.Exec.Graph
	mi := ModelInfo{ID: e.id, Path: e.m.Path, Family: g.Arch, Device: e.pool.device, Context: e.pool.context(),
		Slots: e.pool.max, SlotsInUse: e.pool.inUse(), Sessions: s.sessionCount(e), Blocks: g.Layers}
	types := map[quant.Type]bool{}
	for _, w := range e.m.Exec.Weights {
		types[w.Type] = true
		n := int64(1)
		for _, d := range w.Dims {
			n *= d
		}
		mi.Parameters += n
	}
	for t := range types {
		mi.QuantTypes = append(mi.QuantTypes, t.String())
	}
	sort.Strings(mi.QuantTypes)
	mi.Memory = e.mem
	return mi
}

// Placement says where the model id runs.
func (s *Server) Placement(id string) (Placement, error) {
	e, ok := s.model(id)
	if !ok {
		return Placement{}, errorf(ErrNotFound, "no model %q is loaded", id)
	}
	return placement(e), nil
}

func placement(e *model) Placement {
	dev := e.pool.device
	if dev == "cuda" {
		dev = "cuda:0"
	}
	p := Placement{ModelID: e.id, Device: dev}
	p.Blocks = append(p.Blocks, BlockPlacement{"embed", dev})
	for i := 0; i < e.m.Exec.Graph.Layers; i++ {
		p.Blocks = append(p.Blocks, BlockPlacement{fmt.Sprintf("blk.%d", i), dev})
	}
	p.Blocks = append(p.Blocks, BlockPlacement{"output", dev})
	return p
}

// Place reloads the model id on device: a new pool is made there first
// (so a device that cannot take the model leaves it where it was), new
// requests go to it at once, and the old pool drains as an unload does.
// Named sessions are parked onto host memory before the move and resume
// on the new device.
func (s *Server) Place(id, device string, grace time.Duration) (Placement, error) {
	old, ok := s.model(id)
	if !ok {
		return Placement{}, errorf(ErrNotFound, "no model %q is loaded", id)
	}
	dev, err := s.resolveDevice(device)
	if err != nil {
		return Placement{}, err
	}
	if dev == old.pool.device {
		return placement(old), nil
	}
	return s.move(old, dev, grace)
}

// move serves old's model from a new entry on dev and drains old.
func (s *Server) move(old *model, dev string, grace time.Duration) (Placement, error) {
	id := old.id
	if err := checkKVType(old.m, dev, s.cfg.KVType); err != nil {
		return Placement{}, err
	}
	mi, err := memoryOf(old.m, dev, old.pool.opt.Context, old.pool.max, s.cfg.KVType)
	if err != nil {
		return Placement{}, errorf(ErrInvalid, "%v", err)
	}
	if err := checkFits(mi, dev); err != nil {
		return Placement{}, err
	}
	e := s.newEntry(id, old.m, dev, old.pool.opt.Context)
	if err := e.pool.start(); err != nil {
		return Placement{}, errorf(ErrPrecondition, "%v", err)
	}
	drained := make(chan struct{})
	e.prev = drained
	s.mu.Lock()
	if s.models[id] != old {
		s.mu.Unlock()
		e.pool.close(context.Background())
		return Placement{}, errorf(ErrPrecondition, "the model %q changed during the move; retry", id)
	}
	s.models[id] = e
	s.mu.Unlock()
	s.moveSessions(old, e)
	_, ok := s.drain(old, grace)
	if ok {
		close(drained) // an unload of e may close the model file now
	}
	// Both pools counted into the model's gauges while the old one drained.
	s.metrics.inUse.WithLabelValues(id).Set(float64(e.pool.inUse()))
	s.log.Info("placed", "id", id, "device", dev)
	return placement(e), nil
}

// newEntry builds a registry entry for m (its pool made, not started).
func (s *Server) newEntry(id string, m *generate.Model, device string, ctx int) *model {
	e := &model{id: id, m: m, created: s.cfg.Now().Unix()}
	e.life, e.end = context.WithCancel(context.Background())
	e.setup(s)
	e.pool = newPool(id, m, exec.Options{Threads: s.cfg.Threads, Context: ctx, Mmap: s.cfg.Mmap, KVType: s.cfg.KVType}, s.cfg.MaxSessions, s.cfg.MaxQueue, s.cfg.QueueWait, s.metrics)
	e.pool.device = device
	e.pool.lookup, e.pool.draftMax = s.cfg.Lookup, s.cfg.DraftMax
	e.mem, _ = memoryOf(m, device, ctx, s.cfg.MaxSessions, s.cfg.KVType) // checked before the entry is made
	if est, err := discover.EstimateMemory(m.Exec.Graph, m.Src, discover.Options{Context: ctx, KVType: s.cfg.KVType}); err == nil && est.Context > 0 {
		e.kvTok = est.KV / int64(est.Context)
	}
	return e
}

func (s *Server) forgetMetrics(id string) {
	for _, g := range []interface{ DeleteLabelValues(...string) bool }{s.metrics.queue, s.metrics.inUse, s.metrics.sessionsMax,
		s.metrics.kvCapacity, s.metrics.kvReserved, s.metrics.kvCached, s.metrics.kvHot, s.metrics.prefixReused} {
		g.DeleteLabelValues(id)
	}
}

// inUse is the number of slots running a request or held by a session.
func (p *pool) inUse() int { return len(p.sem) }
