package generate

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
)

func openModel(t *testing.T, path string) *Model {
	t.Helper()
	m, err := Open(td + path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newEngine(t *testing.T, m *Model, opt exec.Options, sessions int) *Engine {
	t.Helper()
	if opt.Threads == 0 {
		opt.Threads = 2
	}
	e, err := m.NewEngine(opt, sessions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// run generates req on s and returns each step's token and a copy of its logits.
func run(t *testing.T, s *Session, req Request) (*Result, []int32, [][]float32) {
	t.Helper()
	var toks []int32
	var logits [][]float32
	res, err := s.GenerateSteps(context.Background(), req, StepOptions{}, func(st Step) error {
		if st.Token >= 0 {
			toks = append(toks, st.Token)
			logits = append(logits, slices.Clone(st.Logits))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, toks, logits
}

func sameLogits(t *testing.T, what string, got, want [][]float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d steps, want %d", what, len(got), len(want))
	}
	for i := range got {
		for j := range got[i] {
			if d := math.Abs(float64(got[i][j] - want[i][j])); d > tol || math.IsNaN(d) {
				t.Fatalf("%s: step %d logit %d: %g, want %g", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// A session parked with Snapshot and restored into another session (of the
// same engine or of a runner of its own) continues with exactly the logits
// it would have had without parking.
func TestSnapshotRestore(t *testing.T) {
	for _, c := range []struct{ model, kv string }{
		{"stories260K.gguf", exec.KVF16}, {"synthetic/tiny256-Q4_K_M.gguf", exec.KVF16}, {"synthetic/tiny256-Q4_K_M.gguf", exec.KVQ8_0},
	} {
		model := c.model
		t.Run(model+" "+c.kv, func(t *testing.T) {
			m := openModel(t, model)
			e := newEngine(t, m, exec.Options{Context: 96, KVType: c.kv}, 2)
			a, b := e.Session(m, 0), e.Session(m, 1)
			run(t, a, Request{Tokens: []int32{1, 17, 30, 42}, MaxTokens: 12, Sampling: greedy()})
			snap, err := a.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			held := a.Cached()
			if len(snap.Tokens) != len(held) || len(held) != 4+11 {
				t.Fatalf("snapshot of %d tokens, session holds %d (want 15)", len(snap.Tokens), len(held))
			}
			if snap.Bytes() != int64(len(held))*(int64(e.KVLayout().BytesPerToken())+4) {
				t.Errorf("snapshot takes %d bytes for %d tokens of %d", snap.Bytes(), len(held), e.KVLayout().BytesPerToken())
			}
			// Continue: the held tokens plus a new turn.
			next := Request{Tokens: append(slices.Clone(held), 50, 61, 72), MaxTokens: 16, Sampling: greedy()}
			res, want, wantL := run(t, a, next)
			if res.Reused != len(held) || res.Prefilled != 3 {
				t.Fatalf("reused %d and prefilled %d, want %d and 3", res.Reused, res.Prefilled, len(held))
			}
			run(t, b, Request{Tokens: []int32{1, 99, 98, 97, 96}, MaxTokens: 5, Sampling: greedy()}) // b holds something else
			if err := b.Restore(snap); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(b.Cached(), held) {
				t.Fatalf("restored session holds %v, want %v", b.Cached(), held)
			}
			res, got, gotL := run(t, b, next)
			if res.Reused != len(held) || !slices.Equal(got, want) {
				t.Fatalf("restored: reused %d, tokens %v, want %v", res.Reused, got, want)
			}
			sameLogits(t, "restored in the engine", gotL, wantL, 0)

			alone, err := m.NewSession(exec.Options{Threads: 2, Context: 96, KVType: c.kv})
			if err != nil {
				t.Fatal(err)
			}
			defer alone.Close()
			if err := alone.Restore(snap); err != nil {
				t.Fatal(err)
			}
			_, got, gotL = run(t, alone, next)
			if !slices.Equal(got, want) {
				t.Fatalf("restored alone: tokens %v, want %v", got, want)
			}
			sameLogits(t, "restored in a runner of its own", gotL, wantL, 0)
		})
	}
}

func TestRestoreRefuses(t *testing.T) {
	m := openModel(t, "stories260K.gguf")
	o := openModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	e := newEngine(t, m, exec.Options{Context: 16}, 1)
	s := e.Session(m, 0)
	run(t, s, Request{Tokens: []int32{1, 17, 30}, MaxTokens: 4, Sampling: greedy()})
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	other, err := o.NewSession(exec.Options{Threads: 1, Context: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	run(t, other, Request{Tokens: []int32{1, 17, 30}, MaxTokens: 4, Sampling: greedy()})
	otherSnap, err := other.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	q8, err := o.NewSession(exec.Options{Threads: 1, Context: 16, KVType: exec.KVQ8_0})
	if err != nil {
		t.Fatal(err)
	}
	defer q8.Close()
	small, err := m.NewSession(exec.Options{Threads: 1, Context: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	short := *snap
	short.KV = snap.KV[:len(snap.KV)-1]
	badTok := *snap
	badTok.Tokens = slices.Clone(snap.Tokens)
	badTok.Tokens[1] = 1 << 20
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"another model", other.Restore(snap), "not this model's"},
		{"another cache type", q8.Restore(otherSnap), "[128 128] (f16) are not this model's [128 128] (q8_0)"},
		{"a short context", small.Restore(snap), "exceed the context"},
		{"missing bytes", s.Restore(&short), "need"},
		{"a bad token", s.Restore(&badTok), "outside the vocabulary"},
		{"nil", s.Restore(nil), "no snapshot"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("restore from %s: %v, want an error with %q", c.name, c.err, c.want)
		}
	}
	if !slices.Equal(s.Cached(), snap.Tokens) {
		t.Errorf("refused restores changed the session: %v", s.Cached())
	}
}

// A request sharing a prefix with what a session holds feeds only the rest,
// and generates what a cold session generates: on tiny256-Q4_K_M (one
// kernel for one row and many) the logits are equal bit for bit; on
// stories260K (F32: llama.cpp's one-row and many-row kernels differ) the
// greedy text is equal and the logits within float noise.
func TestPrefixCacheMatchesCold(t *testing.T) {
	for _, c := range []struct {
		model string
		tol   float64
	}{{"synthetic/tiny256-Q4_K_M.gguf", 0}, {"stories260K.gguf", 0}} {
		t.Run(c.model, func(t *testing.T) {
			m := openModel(t, c.model)
			sys := []int32{1, 17, 30, 42, 55, 61, 70, 88}
			first := Request{Tokens: append(slices.Clone(sys), 101, 102, 103), MaxTokens: 8, Sampling: greedy()}
			second := Request{Tokens: append(slices.Clone(sys), 201, 202, 203, 204), MaxTokens: 24, Sampling: greedy()}

			cold := newEngine(t, m, exec.Options{Context: 64}, 1)
			res, want, wantL := run(t, cold.Session(m, 0), second)
			if res.Reused != 0 || res.Prefilled != len(second.Tokens) {
				t.Fatalf("cold: reused %d, prefilled %d", res.Reused, res.Prefilled)
			}
			warm := newEngine(t, m, exec.Options{Context: 64}, 1)
			s := warm.Session(m, 0)
			run(t, s, first)
			rows := warm.Stats().Rows
			res, got, gotL := run(t, s, second)
			if res.Reused != len(sys) || res.Prefilled != 4 {
				t.Fatalf("warm: reused %d, prefilled %d, want %d and 4", res.Reused, res.Prefilled, len(sys))
			}
			if fed := warm.Stats().Rows - rows; fed != int64(4+len(got)-1) {
				t.Errorf("warm run fed %d rows, want %d", fed, 4+len(got)-1)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("warm tokens %v, cold %v", got, want)
			}
			sameLogits(t, "warm vs cold", gotL, wantL, c.tol)

			// The same prompt again: only its last token is fed again.
			res, got, _ = run(t, s, second)
			if res.Reused != len(second.Tokens)-1 || !slices.Equal(got, want) {
				t.Errorf("repeat: reused %d of %d, tokens %v", res.Reused, len(second.Tokens), got)
			}
		})
	}
}

// n choices from one prefill: the prompt's rows are fed once, greedy
// choices are identical, seeded choices differ from one another but repeat
// exactly, and each equals the single-session run with its seed.
func TestGenerateN(t *testing.T) {
	m := openModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	e := newEngine(t, m, exec.Options{Context: 64}, 3)
	sessions := []*Session{e.Session(m, 0), e.Session(m, 1), e.Session(m, 2)}
	prompt := []int32{1, 17, 30, 42, 55}
	const T = 10
	gen := func(req Request, seeds []uint64) []string {
		out := make([]string, len(seeds))
		var mu sync.Mutex
		texts := make([]strings.Builder, len(seeds))
		res, errs := GenerateN(context.Background(), sessions, req, seeds, StepOptions{}, func(i int, st Step) error {
			mu.Lock()
			texts[i].WriteString(st.Text)
			mu.Unlock()
			return nil
		})
		for i, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
			if len(res[i].Tokens) != T {
				t.Fatalf("choice %d: %d tokens", i, len(res[i].Tokens))
			}
			out[i] = texts[i].String()
		}
		if res[0].Reused+res[0].Prefilled != len(prompt) || res[1].Prefilled != 0 || res[2].Reused != len(prompt) {
			t.Errorf("prefilled %d/%d, reused %d", res[0].Prefilled, res[1].Prefilled, res[2].Reused)
		}
		return out
	}
	greedyReq := Request{Tokens: prompt, MaxTokens: T, Sampling: greedy(), IgnoreEOS: true}
	before := e.Stats().Rows
	g := gen(greedyReq, []uint64{1, 2, 3})
	if fed := e.Stats().Rows - before; fed != int64(len(prompt)+3*(T-1)) {
		t.Errorf("fed %d rows, want one prefill of %d and 3×%d decodes", fed, len(prompt), T-1)
	}
	if g[0] != g[1] || g[1] != g[2] || g[0] == "" {
		t.Errorf("greedy choices differ: %q", g)
	}
	for i, s := range sessions {
		if len(s.Cached()) != len(prompt)+T-1 {
			t.Errorf("session %d holds %d tokens", i, len(s.Cached()))
		}
	}

	p := greedy()
	p.Temperature = 1
	seeded := greedyReq
	seeded.Sampling = p
	seeds := []uint64{7, 8, 9}
	a := gen(seeded, seeds)
	if a[0] == a[1] && a[1] == a[2] {
		t.Errorf("seeded choices are all equal: %q", a)
	}
	if b := gen(seeded, seeds); !slices.Equal(a, b) {
		t.Errorf("seeded choices do not repeat:\n%q\n%q", a, b)
	}
	for i, seed := range seeds {
		q := seeded
		q.Sampling.Seed = seed
		var b strings.Builder
		if _, err := sessions[0].Generate(context.Background(), q, func(s string) error { b.WriteString(s); return nil }); err != nil {
			t.Fatal(err)
		}
		if b.String() != a[i] {
			t.Errorf("choice %d (seed %d): %q, alone %q", i, seed, a[i], b.String())
		}
	}

	if _, errs := GenerateN(context.Background(), []*Session{sessions[0], sessions[0]}, greedyReq, []uint64{1, 2}, StepOptions{}, func(int, Step) error { return nil }); errs[0] == nil {
		t.Error("a slot given twice was accepted")
	}
	alone := open(t, "stories260K.gguf", exec.Options{})
	if _, errs := GenerateN(context.Background(), []*Session{alone}, greedyReq, []uint64{1}, StepOptions{}, func(int, Step) error { return nil }); errs[0] == nil {
		t.Error("a session outside an engine was accepted")
	}
}

// Embed is the mean of the final hidden state over the positions, the same
// through an engine (beside another session's decode), on a runner of its
// own, and computed directly token by token.
func TestEmbed(t *testing.T) {
	m := openModel(t, "stories260K.gguf")
	ids := []int32{1, 403, 407, 261, 378, 432, 383}
	r, err := exec.NewRunner(m.Exec, exec.Options{Threads: 2, Context: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := make([]float64, r.HiddenWidth())
	for _, id := range ids {
		h, err := r.ForwardHidden([]int32{id})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range h {
			want[i] += float64(v) / float64(len(ids))
		}
	}
	check := func(what string, got []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[i]); d > 2e-3 {
				t.Fatalf("%s: value %d is %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	alone := open(t, "stories260K.gguf", exec.Options{MaxBatch: 3, Context: 32}) // three chunks
	got, err := alone.Embed(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	check("alone", got)

	e := newEngine(t, m, exec.Options{Context: 32, MaxBatch: 4}, 2)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a decode sharing the steps
		defer wg.Done()
		p := greedy()
		if _, err := e.Session(m, 1).Generate(context.Background(), Request{Tokens: []int32{1, 17}, MaxTokens: 20, Sampling: p, IgnoreEOS: true}, func(string) error { return nil }); err != nil {
			t.Error(err)
		}
	}()
	s := e.Session(m, 0)
	got, err = s.Embed(context.Background(), ids)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	check("engine", got)
	if !slices.Equal(s.Cached(), ids) {
		t.Errorf("after Embed the session holds %v", s.Cached())
	}
	if _, err := s.Embed(context.Background(), make([]int32, 33)); err == nil {
		t.Error("an input longer than the context was accepted")
	}
	if _, err := s.Embed(context.Background(), nil); err == nil {
		t.Error("an empty input was accepted")
	}
}

// A prefix of a snapshot restores like a snapshot taken at that length, in
// either cache type.
func TestSnapshotPrefix(t *testing.T) {
	snapshotPrefix(t, "stories260K.gguf", exec.KVF16)
	snapshotPrefix(t, "synthetic/tiny256-Q4_K_M.gguf", exec.KVQ8_0)
}

func snapshotPrefix(t *testing.T, model, kv string) {
	m := openModel(t, model)
	e := newEngine(t, m, exec.Options{Context: 64, KVType: kv}, 2)
	a, b := e.Session(m, 0), e.Session(m, 1)
	run(t, a, Request{Tokens: []int32{1, 17, 30, 42, 55, 61}, MaxTokens: 6, Sampling: greedy()})
	full, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := a.SnapshotPrefix(4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := full.Prefix(4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want.Tokens) || !slices.Equal(got.KV, want.KV) || got.Bytes() != want.Bytes() {
		t.Fatalf("Prefix(4): %v / %d bytes, SnapshotPrefix(4): %v / %d bytes", got.Tokens, len(got.KV), want.Tokens, len(want.KV))
	}
	if err := b.Restore(got); err != nil {
		t.Fatal(err)
	}
	res, _, _ := run(t, b, Request{Tokens: []int32{1, 17, 30, 42, 99}, MaxTokens: 2, Sampling: greedy()})
	if res.Reused != 4 {
		t.Errorf("reused %d of the restored prefix of 4", res.Reused)
	}
	if _, err := full.Prefix(len(full.Tokens) + 1); err == nil {
		t.Error("a prefix longer than the snapshot")
	}
	if _, err := a.SnapshotPrefix(100); err == nil {
		t.Error("a snapshot prefix longer than the cache")
	}
}
