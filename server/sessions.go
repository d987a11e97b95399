package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jitllm/jitllm/runtime/discover"
	"github.com/jitllm/jitllm/runtime/generate"
)

// Named sessions: a conversation the server keeps between requests. An
// active session holds one slot of its model's pool, so its KV cache (and
// the prefix reuse of runtime/generate) carries over from turn to turn;
// parking copies the KV to host memory (generate.Session.Snapshot) and
// gives the slot back, resuming takes a slot and restores it. Chat and
// completion requests run on one with the SessionHeader header.

// SessionHeader names the session a chat or completion request runs on.
const SessionHeader = "X-Jitllm-Session"

// MaxNamedSessions bounds the named sessions a server holds.
const MaxNamedSessions = 256

// Session states.
const (
	SessionActive = "active" // holds a slot, KV in place
	SessionBusy   = "busy"   // a request runs on it
	SessionParked = "parked" // KV in host memory, no slot
)

// SessionInfo describes a named session.
type SessionInfo struct {
	ID, ModelID, State string
	Tokens             int   // positions its KV holds
	Bytes              int64 // their KV bytes, in the slot or in host memory
	Created, LastUsed  time.Time
}

type sessionTable struct {
	mu     sync.Mutex
	byID   map[string]*named
	parked atomic.Int64 // host bytes of every parked snapshot
}

// named is one named session. mu is held by whatever works on it (a
// request, park, resume); gone and the model entry's next pointer are how
// an unload or a re-placement reaches a session in use: whoever holds mu
// settles them before letting go.
type named struct {
	id, modelID string
	created     time.Time

	mu   sync.Mutex
	e    *model
	sess *generate.Session // the held slot; nil when parked
	snap *generate.Snapshot

	gone   atomic.Bool
	busy   atomic.Bool
	parked atomic.Bool
	tokens atomic.Int64
	bytes  atomic.Int64
	used   atomic.Int64 // unix nanoseconds
}

func (t *sessionTable) get(id string) (*named, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.byID[id]
	return n, ok
}

func sessionNotFound(id string) error {
	return errorf(ErrNotFound, "no session %q", id)
}

// lock takes n and settles it (a move or an unload that happened while it
// was idle); it fails when n is gone.
func (s *Server) lockNamed(n *named, wait bool) error {
	if wait {
		n.mu.Lock()
	} else if !n.mu.TryLock() {
		return errorf(ErrPrecondition, "the session %q is running a request", n.id)
	}
	s.settle(n)
	if n.gone.Load() {
		n.mu.Unlock()
		return sessionNotFound(n.id)
	}
	return nil
}

func (s *Server) unlockNamed(n *named) {
	s.settle(n)
	n.mu.Unlock()
}

// settle applies what happened to n's model: a gone session gives its slot
// back; one whose model was re-placed parks (its slot belongs to the old
// pool, which is draining) and follows the model to its new entry.
func (s *Server) settle(n *named) {
	for !n.gone.Load() {
		next := n.e.next.Load()
		if next == nil {
			break
		}
		if n.sess != nil {
			if err := s.parkLocked(n, false); err != nil {
				s.log.Warn("session lost its KV moving with its model", "session", n.id, "err", err)
				n.e.pool.release(n.sess)
				n.sess = nil
				n.tokens.Store(0)
				n.bytes.Store(0)
				n.parked.Store(true)
			}
		}
		n.e = next
	}
	if n.gone.Load() {
		if n.sess != nil {
			n.e.pool.release(n.sess)
			n.sess = nil
		}
		if n.snap != nil {
			s.named.parked.Add(-n.snap.Bytes())
			n.snap = nil
		}
	}
}

// CreateSession starts a named session on model: it takes a slot of the
// model's pool (waiting as a request does).
func (s *Server) CreateSession(ctx context.Context, modelID string) (SessionInfo, error) {
	e, ok := s.model(modelID)
	if !ok {
		return SessionInfo{}, errorf(ErrNotFound, "no model %q is loaded", modelID)
	}
	t := &s.named
	t.mu.Lock()
	full := len(t.byID) >= MaxNamedSessions
	t.mu.Unlock()
	if full {
		return SessionInfo{}, errorf(ErrNoMemory, "%d named sessions exist (at most %d); delete some", MaxNamedSessions, MaxNamedSessions)
	}
	sess, err := e.pool.acquire(ctx)
	if err != nil {
		return SessionInfo{}, poolErr(err)
	}
	now := s.cfg.Now()
	n := &named{id: newID("sess_"), modelID: modelID, created: now, e: e, sess: sess}
	n.used.Store(now.UnixNano())
	n.tokens.Store(int64(len(sess.Cached())))
	n.bytes.Store(n.tokens.Load() * e.kvTok)
	t.mu.Lock()
	if t.byID == nil {
		t.byID = map[string]*named{}
	}
	full = len(t.byID) >= MaxNamedSessions
	if !full {
		t.byID[n.id] = n
	}
	t.mu.Unlock()
	if full {
		e.pool.release(sess)
		return SessionInfo{}, errorf(ErrNoMemory, "%d named sessions exist (at most %d); delete some", MaxNamedSessions, MaxNamedSessions)
	}
	// The model may have been unloaded or moved while we waited.
	if err := s.lockNamed(n, true); err != nil {
		return SessionInfo{}, err
	}
	s.unlockNamed(n)
	return n.info(), nil
}

// poolErr classes the pool's refusals.
func poolErr(err error) error {
	switch {
	case errors.Is(err, errQueueFull), errors.Is(err, errBusy):
		return errorf(ErrNoMemory, "%v (every slot of the model is in use; park a session or retry)", err)
	case errors.Is(err, errClosed):
		return errorf(ErrPrecondition, "%v", err)
	}
	return err
}

func (n *named) info() SessionInfo {
	st := SessionActive
	switch {
	case n.busy.Load():
		st = SessionBusy
	case n.parked.Load():
		st = SessionParked
	}
	return SessionInfo{ID: n.id, ModelID: n.modelID, State: st, Tokens: int(n.tokens.Load()), Bytes: n.bytes.Load(),
		Created: n.created, LastUsed: time.Unix(0, n.used.Load())}
}

// GetSession describes the session id.
func (s *Server) GetSession(id string) (SessionInfo, error) {
	n, ok := s.named.get(id)
	if !ok {
		return SessionInfo{}, sessionNotFound(id)
	}
	return n.info(), nil
}

// Sessions lists the named sessions (of modelID, or all), sorted by id.
func (s *Server) Sessions(modelID string) []SessionInfo {
	t := &s.named
	t.mu.Lock()
	var out []SessionInfo
	for _, n := range t.byID {
		if modelID == "" || n.modelID == modelID {
			out = append(out, n.info())
		}
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ParkSession moves the session's KV to host memory and frees its slot.
// Parking a parked session does nothing.
func (s *Server) ParkSession(id string) (SessionInfo, error) {
	n, ok := s.named.get(id)
	if !ok {
		return SessionInfo{}, sessionNotFound(id)
	}
	if err := s.lockNamed(n, false); err != nil {
		return SessionInfo{}, err
	}
	defer s.unlockNamed(n)
	if n.sess == nil {
		return n.info(), nil
	}
	if err := s.parkLocked(n, true); err != nil {
		return SessionInfo{}, err
	}
	return n.info(), nil
}

// parkLocked snapshots n's slot and gives it back; bounded tells whether
// to refuse a snapshot that would take the parked total past half of the
// host's available memory (a move parks regardless: its slot is going).
func (s *Server) parkLocked(n *named, bounded bool) error {
	if bounded {
		need := int64(len(n.sess.Cached())) * n.e.kvTok
		if avail := int64(discover.HostInfo().MemAvailable); avail > 0 && s.named.parked.Load()+need > avail/2 {
			return errorf(ErrNoMemory, "parking %s would take parked sessions past half of the host's available memory (%s)", discover.GiB(need), discover.GiB(avail))
		}
	}
	snap, err := n.sess.Snapshot()
	if err != nil {
		return errorf(ErrPrecondition, "%v", err)
	}
	n.e.pool.release(n.sess)
	n.sess, n.snap = nil, snap
	s.named.parked.Add(snap.Bytes())
	n.tokens.Store(int64(len(snap.Tokens)))
	n.bytes.Store(snap.Bytes())
	n.parked.Store(true)
	return nil
}

// ResumeSession takes a slot for the session and restores its KV.
// Resuming an active session does nothing.
func (s *Server) ResumeSession(ctx context.Context, id string) (SessionInfo, error) {
	n, ok := s.named.get(id)
	if !ok {
		return SessionInfo{}, sessionNotFound(id)
	}
	if err := s.lockNamed(n, false); err != nil {
		return SessionInfo{}, err
	}
	defer s.unlockNamed(n)
	if err := s.resumeLocked(ctx, n); err != nil {
		return SessionInfo{}, err
	}
	return n.info(), nil
}

func (s *Server) resumeLocked(ctx context.Context, n *named) error {
	if n.sess != nil {
		return nil
	}
	sess, err := n.e.pool.acquire(ctx)
	if err != nil {
		return poolErr(err)
	}
	if n.snap != nil {
		if err := sess.Restore(n.snap); err != nil {
			n.e.pool.release(sess)
			return errorf(ErrPrecondition, "%v", err)
		}
		s.named.parked.Add(-n.snap.Bytes())
	}
	n.sess, n.snap = sess, nil
	n.parked.Store(false)
	n.tokens.Store(int64(len(sess.Cached())))
	n.bytes.Store(n.tokens.Load() * n.e.kvTok)
	return nil
}

// DeleteSession forgets the session and frees its slot or snapshot.
func (s *Server) DeleteSession(id string) error {
	n, ok := s.named.get(id)
	if !ok {
		return sessionNotFound(id)
	}
	if err := s.lockNamed(n, false); err != nil {
		return err
	}
	s.forget(n)
	s.unlockNamed(n)
	return nil
}

// forget removes n from the table; its holder (or the caller) settles it.
func (s *Server) forget(n *named) {
	n.gone.Store(true)
	t := &s.named
	t.mu.Lock()
	delete(t.byID, n.id)
	t.mu.Unlock()
}

// dropSessions deletes the named sessions of e's model (it is being
// unloaded) and returns how many there were. Those in use give their slot
// back when their request ends.
func (s *Server) dropSessions(e *model) int {
	t := &s.named
	t.mu.Lock()
	var ns []*named
	for _, n := range t.byID {
		if n.modelID == e.id {
			ns = append(ns, n)
		}
	}
	t.mu.Unlock()
	for _, n := range ns {
		s.forget(n)
		if n.mu.TryLock() {
			s.unlockNamed(n)
		}
	}
	return len(ns)
}

// moveSessions points the named sessions of old at e: idle ones park now,
// busy ones when their request ends; each resumes on e on its next use.
func (s *Server) moveSessions(old, e *model) {
	old.next.Store(e)
	t := &s.named
	t.mu.Lock()
	var ns []*named
	for _, n := range t.byID {
		if n.modelID == e.id {
			ns = append(ns, n)
		}
	}
	t.mu.Unlock()
	for _, n := range ns {
		if n.mu.TryLock() {
			s.unlockNamed(n)
		}
	}
}

func (s *Server) sessionCount(e *model) int {
	t := &s.named
	t.mu.Lock()
	defer t.mu.Unlock()
	c := 0
	for _, n := range t.byID {
		if n.modelID == e.id {
			c++
		}
	}
	return c
}

// sessionFor gives a request its session: a slot of the pool, or, with
// the SessionHeader, the named session's own (resumed first if parked).
// *m becomes the entry the session runs on. release ends the request's
// use of it.
func (s *Server) sessionFor(r *http.Request, m **model) (*generate.Session, func(), error) {
	id := r.Header.Get(SessionHeader)
	if id == "" {
		e := *m
		sess, err := e.pool.acquire(r.Context())
		if err != nil {
			return nil, nil, err
		}
		return sess, func() { e.pool.release(sess) }, nil
	}
	n, ok := s.named.get(id)
	if !ok {
		return nil, nil, &apiError{status: http.StatusNotFound, kind: "not_found", param: SessionHeader,
			msg: fmt.Sprintf("no session %q (create one with the control plane's SessionService)", id)}
	}
	if n.modelID != (*m).id {
		return nil, nil, badRequest("model", "the session %q belongs to the model %q, not %q", id, n.modelID, (*m).id)
	}
	if err := s.lockNamed(n, false); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil, &apiError{status: http.StatusNotFound, kind: "not_found", param: SessionHeader, msg: err.Error()}
		}
		return nil, nil, &apiError{status: http.StatusConflict, kind: "invalid_request", param: SessionHeader, msg: err.Error()}
	}
	if err := s.resumeLocked(r.Context(), n); err != nil {
		s.unlockNamed(n)
		if errors.Is(err, ErrNoMemory) {
			return nil, nil, errBusy
		}
		return nil, nil, err
	}
	*m = n.e
	n.busy.Store(true)
	return n.sess, func() {
		if n.sess != nil {
			n.tokens.Store(int64(len(n.sess.Cached())))
			n.bytes.Store(n.tokens.Load() * n.e.kvTok)
		}
		n.used.Store(s.cfg.Now().UnixNano())
		n.busy.Store(false)
		s.unlockNamed(n)
	}, nil
}
