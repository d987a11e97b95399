package hostmem

import (
	"runtime"
	"testing"
)

func TestParseMeminfo(t *testing.T) {
	total, avail := parseMeminfo([]byte("MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\nCached: 5 kB\n"))
	if total != 16000000*1024 || avail != 8000000*1024 {
		t.Errorf("got %d %d", total, avail)
	}
	// Kernels before 3.14: no MemAvailable, free + cached stand in.
	_, avail = parseMeminfo([]byte("MemTotal: 100 kB\nMemFree: 10 kB\nCached: 20 kB\n"))
	if avail != 30*1024 {
		t.Errorf("old kernel: available %d", avail)
	}
}

func TestReadOnLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only /proc/meminfo is checked: this is " + runtime.GOOS)
	}
	total, avail, src := Read()
	if total == 0 || avail == 0 || avail > total || src == "unknown" {
		t.Errorf("memory %d total, %d available (%s)", total, avail, src)
	}
}
