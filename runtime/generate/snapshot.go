package generate

import (
	"errors"
	"fmt"

	"github.com/jitllm/jitllm/runtime/exec"
)

// Snapshot is a session's KV cache parked in host memory: the tokens of
// its positions and their K/V rows, so the session (or another of the same
// model, in any engine) can continue as if it had never stopped.
type Snapshot struct {
	Tokens []int32       // the token at each cached position
	Layout exec.KVLayout // the rows KV holds per position
	KV     []byte        // exec.Runner.SaveSeq's bytes for len(Tokens) positions
}

// Bytes is the host memory the snapshot takes.
func (s *Snapshot) Bytes() int64 { return int64(len(s.KV)) + 4*int64(len(s.Tokens)) }

// kvStore is a sequence whose KV rows can be read and replaced.
type kvStore interface {
	kvLayout() exec.KVLayout
	saveKV(n int, dst []byte) error
	loadKV(n int, src []byte) error
}

// seq0 is a session's own runner, whose sequence is 0.
type seq0 struct{ r *exec.Runner }

func (q seq0) kvLayout() exec.KVLayout        { return q.r.KVLayout() }
func (q seq0) saveKV(n int, dst []byte) error { return q.r.SaveSeq(0, n, dst) }
func (q seq0) loadKV(n int, src []byte) error { return q.r.LoadSeq(0, n, src) }
func (s *slot) kvLayout() exec.KVLayout       { return s.e.r.KVLayout() }
func (s *slot) saveKV(n int, dst []byte) error {
	return s.locked(func() error { return s.e.r.SaveSeq(int(s.seq), n, dst) })
}
func (s *slot) loadKV(n int, src []byte) error {
	return s.locked(func() error { return s.e.r.LoadSeq(int(s.seq), n, src) })
}
func (s *slot) locked(f func() error) error { s.e.mu.Lock(); defer s.e.mu.Unlock(); return f() }

func (s *Session) kv() (kvStore, error) {
	switch r := s.r.(type) {
	case *slot:
		return r, nil
	case *exec.Runner:
		return seq0{r}, nil
	}
	return nil, fmt.Errorf("KV snapshots: the %T backend does not support them", s.r)
}

// Snapshot copies the session's KV cache to host memory. Call it between
// requests (a session runs one at a time).
func (s *Session) Snapshot() (*Snapshot, error) {
	kv, err := s.kv()
	if err != nil {
		return nil, err
	}
	n := len(s.st.hist)
	if p := s.r.Pos(); p != n {
		return nil, fmt.Errorf("KV snapshot: the runner holds %d positions, the session knows %d tokens", p, n)
	}
	l := kv.kvLayout()
	snap := &Snapshot{Tokens: append([]int32(nil), s.st.hist...), Layout: l, KV: make([]byte, n*l.BytesPerToken())}
	if err := kv.saveKV(n, snap.KV); err != nil {
		return nil, err
	}
	return snap, nil
}

// Restore replaces the session's KV cache with snap's, which must come
// from a session of the same model and fit its context.
func (s *Session) Restore(snap *Snapshot) error {
	if snap == nil {
		return errors.New("KV restore: no snapshot")
	}
	kv, err := s.kv()
	if err != nil {
		return err
	}
	l := kv.kvLayout()
	n := len(snap.Tokens)
	switch {
	case !l.Equal(snap.Layout):
		return fmt.Errorf("KV restore: the snapshot's rows %v (%s) are not this model's %v (%s)", snap.Layout.Dims, orF16(snap.Layout.Type), l.Dims, l.Type)
	case n > s.r.Context():
		return fmt.Errorf("KV restore: %d positions exceed the context of %d", n, s.r.Context())
	case len(snap.KV) != n*l.BytesPerToken():
		return fmt.Errorf("KV restore: %d positions need %d bytes of KV, the snapshot has %d", n, n*l.BytesPerToken(), len(snap.KV))
	}
	vocab := s.m.Exec.VocabSize()
	for i, t := range snap.Tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("KV restore: token %d at position %d is outside the vocabulary of %d", t, i, vocab)
		}
	}
	if err := kv.loadKV(n, snap.KV); err != nil {
		s.truncate(0)
		return err
	}
	s.st.hist = append(s.st.hist[:0], snap.Tokens...)
	return nil
}

// SnapshotPrefix is Snapshot of the first n cached positions only.
func (s *Session) SnapshotPrefix(n int) (*Snapshot, error) {
	kv, err := s.kv()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > len(s.st.hist) {
		return nil, fmt.Errorf("KV snapshot: %d positions of a session holding %d", n, len(s.st.hist))
	}
	if p := s.r.Pos(); p != len(s.st.hist) {
		return nil, fmt.Errorf("KV snapshot: the runner holds %d positions, the session knows %d tokens", p, len(s.st.hist))
	}
	l := kv.kvLayout()
	snap := &Snapshot{Tokens: append([]int32(nil), s.st.hist[:n]...), Layout: l, KV: make([]byte, n*l.BytesPerToken())}
	if err := kv.saveKV(n, snap.KV); err != nil {
		return nil, err
	}
	return snap, nil
}

// Prefix is a snapshot of the first n positions of s (its KV re-laid for n
// positions).
func (s *Snapshot) Prefix(n int) (*Snapshot, error) {
	total := len(s.Tokens)
	if n < 0 || n > total {
		return nil, fmt.Errorf("KV snapshot: a prefix of %d positions of %d", n, total)
	}
	if len(s.KV) != total*s.Layout.BytesPerToken() {
		return nil, fmt.Errorf("KV snapshot: %d bytes for %d positions of %d", len(s.KV), total, s.Layout.BytesPerToken())
	}
	out := &Snapshot{Tokens: append([]int32(nil), s.Tokens[:n]...), Layout: s.Layout, KV: make([]byte, 0, n*s.Layout.BytesPerToken())}
	o := 0
	for i := range s.Layout.Dims {
		row := s.Layout.RowBytes(i) // bytes of one position's K (or V) row
		for range 2 {               // K, then V
			out.KV = append(out.KV, s.KV[o:o+n*row]...)
			o += total * row
		}
	}
	return out, nil
}

// orF16 names a layout's unset cache type by its default.
func orF16(kvType string) string {
	if kvType == "" {
		return exec.KVF16
	}
	return kvType
}
