package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sync"

	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/jlm"
)

// nbuf buffers let the read of one chunk overlap the SHA-256 of the last.
const nbuf = 3

// copier reads the source front to back exactly once. Every chunk feeds the
// whole-file CRC-32C (the source's cheap identity) and, when asked, a
// SHA-256 goroutine on another core; tensor chunks also go to the .jlm
// writer, which CRCs and writes them. Both consumers only read a buffer, so
// it is reused once the hasher is done and the writer has moved on.
type copier struct {
	ctx     context.Context
	ra      io.ReaderAt
	opts    Options
	written func(n int64) // called after each chunk written

	free  chan []byte
	toSHA chan []byte // nil unless Options.SourceSHA256
	sha   hash.Hash
	wg    sync.WaitGroup
	crc   hash.Hash32 // CRC-32C of the whole source

	w           *jlm.Writer
	done, total int64
}

func (c *copier) run(src *gguf.File, path string, out jlm.Output) error {
	size := c.opts.BufferSize
	if size <= 0 {
		size = DefaultBufferSize
	}
	c.free = make(chan []byte, nbuf)
	for range nbuf {
		c.free <- make([]byte, size)
	}
	c.crc = crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if c.opts.SourceSHA256 {
		c.sha = sha256.New()
		c.toSHA = make(chan []byte, nbuf)
		c.wg.Add(1)
		go c.hashLoop()
	}
	err := c.copyAll(src, out)
	if c.toSHA != nil {
		close(c.toSHA)
		c.wg.Wait()
	}
	if err != nil {
		return err
	}
	p := source{path: path, crc: c.crc.Sum32()}
	if c.sha != nil {
		p.sha = hex.EncodeToString(c.sha.Sum(nil))
	}
	md := provenance(src, p)
	blocks, warnings := blockLayout(src.Architecture(), c.w.Tensors())
	for _, kv := range blocks.All() {
		md.Set(kv.Key, kv.Value)
	}
	if c.opts.Warn != nil {
		for _, w := range warnings {
			c.opts.Warn(w)
		}
	}
	return c.w.Finish(md)
}

func (c *copier) hashLoop() {
	defer c.wg.Done()
	for b := range c.toSHA {
		c.sha.Write(b)
		c.free <- b[:cap(b)]
	}
}

func (c *copier) copyAll(src *gguf.File, out jlm.Output) error {
	w, err := jlm.NewWriter(out)
	if err != nil {
		return err
	}
	c.w = w
	ts := byOffset(src.Tensors)
	for _, t := range ts {
		c.total += t.Size
	}
	c.progress()
	pos := int64(0)
	for _, t := range ts {
		if err := c.feed(pos, t.Offset-pos, nil); err != nil {
			return err
		}
		tw, err := w.Create(t.Name, t.Type, t.Dims)
		if err != nil {
			return err
		}
		if err := c.feed(t.Offset, t.Size, tw); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if err := tw.Close(); err != nil {
			return err
		}
		pos = t.Offset + t.Size
	}
	return c.feed(pos, src.Size-pos, nil)
}

// feed reads [off, off+n) of the source in chunks, hashing each and writing
// it to dst when dst is not nil (nil: bytes around tensors, only hashed).
func (c *copier) feed(off, n int64, dst io.Writer) error {
	r := io.NewSectionReader(c.ra, off, n)
	for n > 0 {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		buf := <-c.free
		k := min(n, int64(len(buf)))
		b := buf[:k]
		if _, err := io.ReadFull(r, b); err != nil {
			c.free <- buf
			return fmt.Errorf("reading the source at offset %d: %w", off, err)
		}
		c.crc.Write(b)
		if c.sha != nil {
			c.toSHA <- b // the hasher returns buf to c.free
		}
		var err error
		if dst != nil {
			if _, err = dst.Write(b); err == nil {
				c.done += k
				c.written(k)
				c.progress()
			}
		}
		if c.sha == nil {
			c.free <- buf
		}
		if err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

func (c *copier) progress() {
	if c.opts.Progress != nil {
		c.opts.Progress(c.done, c.total)
	}
}
