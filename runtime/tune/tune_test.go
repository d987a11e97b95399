package tune

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func quiet(t *testing.T) *[]string {
	var got []string
	old := Warnf
	Warnf = func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) }
	t.Cleanup(func() { Warnf = old })
	return &got
}

var shape = Shape{Op: "matmul", Type: "Q4_K", Order: "DotQ4_KAVX2", ISA: "avx2", In: 2048, Out: 8192, Batch: 512}

func TestCacheRoundTrip(t *testing.T) {
	warn := quiet(t)
	dir := t.TempDir()
	c := Open(dir, "cpu A", "build 1")
	if _, ok := c.Get(shape); ok {
		t.Fatal("empty cache has a choice")
	}
	want := Params{Rows: 48, XRows: 128, Workers: 2}
	c.Put(shape, want)
	dec := shape
	dec.Batch = 1
	c.Put(dec, Params{Rows: 16, XRows: 1, Workers: 1})
	if _, err := os.Stat(c.Path()); err != nil {
		t.Fatalf("cache not written: %v", err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".tune-*")); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	d := Open(dir, "cpu A", "build 1")
	if got, ok := d.Get(shape); !ok || got != want {
		t.Fatalf("reopened: %+v %v, want %+v", got, ok, want)
	}
	if d.Len() != 2 {
		t.Fatalf("%d choices, want 2", d.Len())
	}
	if len(*warn) != 0 {
		t.Fatalf("warnings: %q", *warn)
	}
}

func TestCorruptCacheIgnored(t *testing.T) {
	for _, body := range []string{"{not json", `{"schema":1,"cpu":"cpu A","build":"build 1","choices":{"x":{"rows":-3}}}`, ""} {
		warn := quiet(t)
		dir := t.TempDir()
		path := filepath.Join(dir, "tune-"+Key("cpu A", "build 1")+".json")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		c := Open(dir, "cpu A", "build 1")
		if c.Len() != 0 {
			t.Fatalf("%q: %d choices read from a corrupt file", body, c.Len())
		}
		if len(*warn) != 1 {
			t.Fatalf("%q: warnings %q, want one", body, *warn)
		}
		// The next choice replaces the bad file with a good one.
		c.Put(shape, Params{Rows: 8, XRows: 8, Workers: 1})
		if Open(dir, "cpu A", "build 1").Len() != 1 {
			t.Fatalf("%q: not rewritten", body)
		}
	}
}

func TestKeyChangeInvalidates(t *testing.T) {
	warn := quiet(t)
	dir := t.TempDir()
	Open(dir, "cpu A", "build 1").Put(shape, Params{Rows: 8, XRows: 8, Workers: 1})
	for _, k := range [][2]string{{"cpu B", "build 1"}, {"cpu A", "build 2"}} {
		if c := Open(dir, k[0], k[1]); c.Len() != 0 {
			t.Errorf("%v sees the choices of cpu A, build 1", k)
		}
	}
	// A file under the right name but written for another key (a hash
	// collision, a copied file) is not trusted either.
	a := Open(dir, "cpu A", "build 1").Path()
	b, _ := os.ReadFile(a)
	other := filepath.Join(dir, "tune-"+Key("cpu C", "build 1")+".json")
	if err := os.WriteFile(other, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if c := Open(dir, "cpu C", "build 1"); c.Len() != 0 {
		t.Error("a file written for another CPU was used")
	}
	if len(*warn) != 1 || !strings.Contains((*warn)[0], "another CPU") {
		t.Errorf("warnings %q", *warn)
	}
}

func TestCandidates(t *testing.T) {
	s := Space{Def: Params{Rows: 30, XRows: 64, Workers: 2}, RowAlign: 4, XAlign: 4, MaxRows: 100, MaxXRows: 64, MaxWorkers: 2}
	for _, mode := range []Mode{Off, Quick, Full} {
		c := s.Candidates(mode)
		if mode == Off && len(c) != 1 {
			t.Fatalf("off: %d candidates", len(c))
		}
		if mode != Off && len(c) < 3 {
			t.Fatalf("%s: only %d candidates", mode, len(c))
		}
		seen := map[Params]bool{}
		for _, p := range c {
			if seen[p] {
				t.Fatalf("%s: %+v listed twice", mode, p)
			}
			seen[p] = true
			if p.Rows%4 != 0 && p.Rows != 100 || p.Rows > 100 || p.XRows > 64 || p.XRows%4 != 0 || p.Workers < 1 || p.Workers > 2 {
				t.Fatalf("%s: %+v outside the space", mode, p)
			}
		}
		if c[0] != (Params{Rows: 32, XRows: 64, Workers: 2}) {
			t.Fatalf("%s: default %+v first", mode, c[0])
		}
	}
	if len(s.Candidates(Full)) <= len(s.Candidates(Quick)) {
		t.Error("full searches no wider than quick")
	}
	dec := Space{Def: Params{Rows: 8, Workers: 2}, MaxRows: 64, MaxXRows: 1, MaxWorkers: 2}
	for _, p := range dec.Candidates(Full) {
		if p.XRows != 1 || p.Prefetch != 0 {
			t.Fatalf("decode candidate %+v", p)
		}
	}
	// a rows kernel's prefetch distance: each one tried in both modes, the
	// default first, with the other parameters at theirs in quick
	dec.Def.Prefetch, dec.Prefetches = 2048, []int{1024, 4096}
	for _, mode := range []Mode{Quick, Full} {
		tried := map[int]bool{}
		for _, p := range dec.Candidates(mode) {
			tried[p.Prefetch] = true
			if mode == Quick && p.Prefetch != 2048 && (p.Rows != 8 || p.Workers != 2) {
				t.Errorf("quick: %+v moves more than the prefetch", p)
			}
		}
		if c := dec.Candidates(mode)[0]; c.Prefetch != 2048 || len(tried) != 3 {
			t.Errorf("%s: default %+v, distances tried %v", mode, c, tried)
		}
	}
	if off := dec.Candidates(Off); len(off) != 1 || off[0].Prefetch != 2048 {
		t.Errorf("off: %+v", off)
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"": Off, "off": Off, "Quick": Quick, "full": Full} {
		if m, err := ParseMode(s); err != nil || m != want {
			t.Errorf("%q: %v %v", s, m, err)
		}
	}
	var m Mode
	if err := m.Set("fast"); err == nil {
		t.Error("accepted fast")
	}
}

func TestBuildAndCPU(t *testing.T) {
	if Build() == "" || Build() != Build() || CPU() == "" {
		t.Fatalf("build %q cpu %q", Build(), CPU())
	}
}
