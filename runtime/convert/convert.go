// Package convert turns GGUF files into .jlm containers (docs/format.md).
// Tensor bytes are copied unchanged, streamed through fixed buffers, so
// memory use does not grow with the model; the output appears only when it
// is complete and synced.
package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/jlm"
	"github.com/jitllm/jitllm/runtime/meta"
)

// Converter names this converter in jlm.converter; bump it when the output
// for the same input changes.
const Converter = "jitllm-convert/1"

// DefaultBufferSize is the copy chunk: large enough that syscalls and
// hashing per chunk cost nothing next to the bytes.
const DefaultBufferSize = 8 << 20

// Options tune Convert.
type Options struct {
	// Force replaces an existing output file.
	Force bool
	// Progress, if set, is called after each chunk with tensor bytes done and total.
	Progress func(done, total int64)
	// SourceSHA256 also records jlm.source.sha256, the SHA-256 of the
	// source file (what model hubs publish). It is off by default because
	// SHA-256 runs at about 1.4 GB/s, slower than the disk, and would set
	// the pace of the whole conversion; jlm.source.crc32c is always there.
	SourceSHA256 bool
	// BufferSize is the copy chunk size (default DefaultBufferSize).
	BufferSize int
	// Warn, if set, receives what the conversion noticed but did not stop
	// for (tensors no graph reads, an architecture without a graph).
	Warn func(string)
	// MatrixType, for a Hugging Face checkpoint, is the float type its
	// matrices are written in: "f32", "f16" or "bf16" (llama.cpp's
	// convert_hf_to_gguf.py --outtype); "" keeps each one's own. Vectors
	// are F32 either way. A GGUF's tensors are always copied as they are.
	MatrixType string
}

// wrapSource lets tests inject a failing reader; nil in normal use.
var wrapSource func(io.ReaderAt) io.ReaderAt

// Convert writes the GGUF at inPath as a .jlm at outPath. It writes to a
// temporary file beside outPath and renames it into place only once it is
// complete and synced; on any failure, including ctx being cancelled, the
// temporary file is removed and outPath is left as it was.
func Convert(ctx context.Context, inPath, outPath string, opts Options) (err error) {
	if err := refuseExisting(outPath, opts.Force); err != nil {
		return err
	}
	src, err := openSource(inPath)
	if err != nil {
		return err
	}
	defer src.Close()
	raw, err := os.Open(inPath)
	if err != nil {
		return err
	}
	defer raw.Close()
	var ra io.ReaderAt = raw
	if wrapSource != nil {
		ra = wrapSource(ra)
	}
	return writeAtomically(ctx, outPath, opts.Force, func(tmp *os.File, wrote func(int64)) error {
		c := &copier{ctx: ctx, ra: ra, opts: opts, written: wrote}
		if err := c.run(src, inPath, tmp); err != nil {
			return fmt.Errorf("converting %s: %w", inPath, err)
		}
		return nil
	})
}

// refuseExisting fails, before any work, when out exists and force is off.
func refuseExisting(out string, force bool) error {
	if _, err := os.Lstat(out); err == nil && !force {
		return fmt.Errorf("%s already exists; use -f (Options.Force) to overwrite it", out)
	}
	return nil
}

// writeAtomically runs write on a temporary file beside outPath, synced in
// the background as it grows (wrote counts the bytes), then syncs it and
// renames it into place; on any failure, ctx's cancellation included, the
// temporary file is removed and outPath is left as it was.
func writeAtomically(ctx context.Context, outPath string, force bool, write func(tmp *os.File, wrote func(int64)) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(outPath), filepath.Base(outPath)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating the output: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	fl := startFlusher(tmp)
	err = write(tmp, fl.wrote)
	fl.stop()
	if err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return install(tmp.Name(), outPath, force)
}

// openSource opens the GGUF, with a clearer message for a .jlm given twice.
func openSource(path string) (*gguf.File, error) {
	f, err := gguf.Open(path)
	if err == nil {
		return f, nil
	}
	if fh, e := os.Open(path); e == nil {
		var m [4]byte
		_, e = io.ReadFull(fh, m[:])
		fh.Close()
		if e == nil && string(m[:]) == jlm.Magic {
			return nil, fmt.Errorf("%s is already a .jlm file; convert takes a GGUF", path)
		}
	}
	return nil, err
}

// install moves the finished temporary file to out. Without force it uses a
// hard link, which fails rather than replace a file that appeared meanwhile.
func install(tmp, out string, force bool) error {
	if force {
		if err := os.Rename(tmp, out); err != nil {
			return fmt.Errorf("moving the output into place: %w", err)
		}
	} else if err := os.Link(tmp, out); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s already exists; use -f (Options.Force) to overwrite it", out)
		}
		// No hard links here (some file systems): check, then rename.
		if _, e := os.Lstat(out); e == nil {
			return fmt.Errorf("%s already exists; use -f (Options.Force) to overwrite it", out)
		}
		if err := os.Rename(tmp, out); err != nil {
			return fmt.Errorf("moving the output into place: %w", err)
		}
	} else if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("removing %s: %w", tmp, err)
	}
	// Sync the directory so the new name survives a crash.
	if d, err := os.Open(filepath.Dir(out)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// source is what Convert learned about the source file while copying it.
type source struct {
	path string
	crc  uint32 // CRC-32C of the whole file
	sha  string // hex SHA-256, "" unless asked for
}

// provenance returns the source's metadata, in order, plus the jlm.* keys.
func provenance(src *gguf.File, s source) *meta.Map {
	md := &meta.Map{}
	for _, kv := range src.Meta.All() {
		md.Set(kv.Key, kv.Value)
	}
	sourceKeys(md, "gguf", src.Version, s.path, src.Size, s.crc, s.sha)
	return md
}

// sourceKeys appends the jlm.* provenance keys (docs/format.md) in their
// order: version 0 and sha "" are left out.
func sourceKeys(md *meta.Map, format string, version uint32, path string, size int64, crc uint32, sha string) {
	md.Set("jlm.converter", meta.Str(Converter))
	md.Set("jlm.source.format", meta.Str(format))
	if version != 0 {
		md.Set("jlm.source.format_version", meta.U32(version))
	}
	md.Set("jlm.source.file", meta.Str(filepath.Base(filepath.Clean(path))))
	md.Set("jlm.source.size", meta.U64(uint64(size)))
	md.Set("jlm.source.crc32c", meta.U32(crc))
	if sha != "" {
		md.Set("jlm.source.sha256", meta.Str(sha))
	}
}

// byOffset returns the tensors in file order, so the source reads forward.
func byOffset(ts []gguf.TensorInfo) []*gguf.TensorInfo {
	out := make([]*gguf.TensorInfo, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Offset < out[b].Offset })
	return out
}

// flushEvery is how much is written between background syncs.
const flushEvery = 256 << 20

// flusher syncs the output in the background as it grows, so the disk
// writes while the copy runs and the final Sync has little left to do.
type flusher struct {
	f       *os.File
	kick    chan struct{}
	done    chan struct{}
	pending int64
}

func startFlusher(f *os.File) *flusher {
	fl := &flusher{f: f, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(fl.done)
		for range fl.kick {
			fl.f.Sync() // errors resurface in the final Sync
		}
	}()
	return fl
}

// wrote counts n more bytes written and wakes the syncer every flushEvery.
func (fl *flusher) wrote(n int64) {
	if fl.pending += n; fl.pending >= flushEvery {
		fl.pending = 0
		select {
		case fl.kick <- struct{}{}:
		default: // a sync is running; it will pick these bytes up
		}
	}
}

func (fl *flusher) stop() {
	close(fl.kick)
	<-fl.done
}
