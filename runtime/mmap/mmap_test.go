package mmap

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAnonIsZeroedAndWritable(t *testing.T) {
	b, err := Anon(3<<20 + 5)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(b)
	if len(b) != 3<<20+5 {
		t.Fatalf("len %d", len(b))
	}
	for i := 0; i < len(b); i += 4093 {
		if b[i] != 0 {
			t.Fatalf("byte %d is %d", i, b[i])
		}
		b[i] = byte(i)
	}
	if _, err := Anon(0); err == nil {
		t.Error("Anon(0) succeeded")
	}
}

func TestMapReadsTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("hello, mapping"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := Map(f, 14)
	if err != nil {
		t.Skipf("no mmap here: %v", err)
	}
	defer Unmap(b)
	if string(b) != "hello, mapping" {
		t.Fatalf("mapped %q", b)
	}
	if _, err := Map(f, 0); err == nil {
		t.Error("Map of 0 bytes succeeded")
	}
}
