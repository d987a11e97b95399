// Package tune chooses the CPU runner's tunable parameters (weight rows per
// task, activation rows per block, workers) for each (op shape, quant type,
// kernel ISA) by measuring candidates the first time the shape runs, and
// keeps the choices on disk so later runs start tuned. The CUDA runner
// keeps its decode mat-vecs' measured shapes (rows, threads, unroll) in
// the same form, one file per GPU (AtDevice).
//
// The cache is one JSON file per (CPU or device, build): a different
// processor or a rebuilt binary has other best choices, so either starts a
// new file. A file that cannot be read or parsed is ignored with a
// warning; it is rewritten, atomically, at the next choice.
package tune

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/klauspost/cpuid/v2"
)

// Mode is how much the tuner measures.
type Mode int

const (
	Off   Mode = iota // built-in defaults, nothing measured or read
	Quick             // a few candidates around the defaults, measured once
	Full              // a wider grid, measured over more calls
)

// ParseMode reads "off", "quick" or "full" ("" is off).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off":
		return Off, nil
	case "quick":
		return Quick, nil
	case "full":
		return Full, nil
	}
	return Off, fmt.Errorf("tune: %q is not off, quick or full", s)
}

func (m Mode) String() string {
	switch m {
	case Quick:
		return "quick"
	case Full:
		return "full"
	}
	return "off"
}

// Set and Type make a *Mode a command-line flag (flag.Value, pflag.Value).
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err == nil {
		*m = v
	}
	return err
}

// Type names the flag's value kind (pflag.Value).
func (m *Mode) Type() string { return "off|quick|full" }

// Params are the tunable parameters of one op shape. Zero fields mean the
// op's default.
type Params struct {
	Rows     int `json:"rows"`               // weight (output) rows per task
	XRows    int `json:"xrows"`              // activation rows per block (batches)
	Workers  int `json:"workers"`            // workers the op runs on
	Prefetch int `json:"prefetch,omitempty"` // bytes ahead the kernel prefetches weights (decode rows kernels; 0: its default)
	// a GPU decode mat-vec's shape (runtime/gpuexec): Rows rows a group
	// of Threads threads, Unroll units a thread's trip
	Threads int `json:"threads,omitempty"`
	Unroll  int `json:"unroll,omitempty"`
	// a GPU prefill product's CTA block (runtime/gpuexec, dsl/kernel's
	// BlockShape): WarpsM×WarpsN warps of TilesM×TilesN mma pieces
	WarpsM int `json:"warps_m,omitempty"`
	WarpsN int `json:"warps_n,omitempty"`
	TilesM int `json:"tiles_m,omitempty"`
	TilesN int `json:"tiles_n,omitempty"`
}

// Shape identifies one tuned op: its kind, the kernel that runs it, and
// its sizes (Batch is the row-count class: 1 for decode, a power of two for
// batches).
type Shape struct {
	Op    string // "matmul"
	Type  string // weight type, "Q4_K"
	Order string // the dot-product order, "DotQ4_KAVX2"
	ISA   string // "go", "avx2", ...
	In    int
	Out   int
	Batch int
}

func (s Shape) String() string {
	return fmt.Sprintf("%s/%s/%s/%s/k%d/n%d/m%d", s.Op, s.Type, s.Order, s.ISA, s.In, s.Out, s.Batch)
}

// Warnf reports a cache problem (a corrupt file, a failed write); tuning
// goes on without the cache. Tests and front ends may replace it.
var Warnf = func(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "jitllm: tune: "+format+"\n", args...)
}

// file is the JSON form of a cache.
type file struct {
	Schema  int               `json:"schema"`
	CPU     string            `json:"cpu"`
	Build   string            `json:"build"`
	Choices map[string]Params `json:"choices"`
}

const schema = 1

// maxFile bounds what is read from a cache file; a real one is a few KiB.
const maxFile = 8 << 20

// Cache is the choices of one (CPU, build), read from and written to one
// file. It is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	path    string // "" keeps the choices in memory only
	cpu     string
	build   string
	choices map[string]Params
}

// Key is the cache file's key: the CPU and the build, hashed to a name.
func Key(cpu, build string) string {
	h := sha256.Sum256([]byte(cpu + "\x00" + build))
	return hex.EncodeToString(h[:8])
}

// Open reads the cache of (cpu, build) in dir; a missing file is an empty
// cache, a corrupt one or one written for another CPU or build is ignored
// with a warning.
func Open(dir, cpu, build string) *Cache {
	c := &Cache{cpu: cpu, build: build, choices: map[string]Params{}}
	if dir == "" {
		return c
	}
	c.path = filepath.Join(dir, "tune-"+Key(cpu, build)+".json")
	f, err := os.Open(c.path)
	if err != nil {
		if !os.IsNotExist(err) {
			Warnf("reading %s: %v; tuning from scratch", c.path, err)
		}
		return c
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		Warnf("reading %s: %v; tuning from scratch", c.path, err)
		return c
	}
	if len(b) > maxFile {
		Warnf("%s is over %d bytes; ignoring it", c.path, maxFile)
		return c
	}
	var fl file
	if err := json.Unmarshal(b, &fl); err != nil {
		Warnf("%s is corrupt (%v); ignoring it", c.path, err)
		return c
	}
	if fl.Schema != schema || fl.CPU != cpu || fl.Build != build {
		Warnf("%s was written for another CPU, build or schema; ignoring it", c.path)
		return c
	}
	for k, p := range fl.Choices {
		if p.Rows < 0 || p.XRows < 0 || p.Workers < 0 {
			Warnf("%s: choice %s has negative fields; ignoring the file", c.path, k)
			clear(c.choices)
			return c
		}
		c.choices[k] = p
	}
	return c
}

// Path is the cache's file ("" when it is kept in memory only).
func (c *Cache) Path() string { return c.path }

// Get returns the choice for s.
func (c *Cache) Get(s Shape) (Params, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.choices[s.String()]
	return p, ok
}

// Len is the number of choices held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.choices)
}

// Put records the choice for s and writes the file (temp name, then rename,
// so a reader never sees half a file). A failed write is warned about and
// the choice kept in memory.
func (c *Cache) Put(s Shape, p Params) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.choices[s.String()] = p
	if c.path == "" {
		return
	}
	if err := c.write(); err != nil {
		Warnf("writing %s: %v", c.path, err)
	}
}

func (c *Cache) write() error {
	b, err := json.MarshalIndent(file{Schema: schema, CPU: c.cpu, Build: c.build, Choices: c.choices}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".tune-*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// CPU is this machine's processor as the cache key uses it.
func CPU() string {
	name := strings.TrimSpace(cpuid.CPU.BrandName)
	if name == "" {
		name = runtime.GOARCH + " CPU"
	}
	return fmt.Sprintf("%s; family %d model %d; %d logical cores", name, cpuid.CPU.Family, cpuid.CPU.Model, cpuid.CPU.LogicalCores)
}

var (
	buildOnce sync.Once
	buildID   string
)

// Build identifies this binary: its VCS revision when it was built from a
// clean checkout, else a hash of the executable (a rebuild with changed
// kernels must not inherit choices measured on the old ones).
func Build() string {
	buildOnce.Do(func() {
		if bi, ok := debug.ReadBuildInfo(); ok {
			var rev, modified string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if rev != "" && modified == "false" {
				buildID = bi.GoVersion + " " + bi.Main.Path + "@" + rev
				return
			}
		}
		buildID = "exe " + exeHash()
	})
	return buildID
}

func exeHash() string {
	p, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	f, err := os.Open(p)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unknown"
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*Cache{}
)

// Default is the process's cache for this CPU and build, in
// os.UserCacheDir()/jitllm (kept in memory where there is no cache dir).
// Every runner of the process shares it.
func Default() *Cache { return DefaultDevice(CPU()) }

// At is the process's shared cache in dir for this CPU and build.
func At(dir string) *Cache { return AtDevice(dir, CPU()) }

// DefaultDevice is Default for device (a GPU's name and driver:
// runtime/gpuexec's choices).
func DefaultDevice(device string) *Cache {
	dir := ""
	if d, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(d, "jitllm")
	}
	return AtDevice(dir, device)
}

// AtDevice is the process's shared cache in dir for device and this build.
func AtDevice(dir, device string) *Cache {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	key := dir + "\x00" + device
	if c, ok := shared[key]; ok {
		return c
	}
	c := Open(dir, device, Build())
	shared[key] = c
	return c
}
