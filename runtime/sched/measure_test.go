package sched

import (
	"math"
	"testing"

	"github.com/jitllm/jitllm/runtime/exec"
)

// A block of a real model times on the CPU to finite, positive rates.
func TestMeasureBlockCPU(t *testing.T) {
	for _, name := range []string{"stories260K.gguf", "synthetic/tiny256-Q4_K_M.gguf"} {
		m := loadModel(t, name)
		cpu := Device{ID: "cpu", Kind: "cpu", Speed: 1}
		s, err := MeasureBlock(m, cpu, exec.Options{Threads: 1}, 16, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, v := range []float64{s.Decode, s.Prefill} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("%s: speeds %+v", name, s)
			}
		}
		t.Logf("%s (%d blocks): decode %.3g, 16-row piece %.3g weight bytes/s", name, m.Graph.Layers, s.Decode, s.Prefill)
	}
}

// MeasureSpeeds measures each distinct device once and sets every entry's
// Speed; when one device cannot be measured, no Speed changes.
func TestMeasureSpeeds(t *testing.T) {
	m := loadModel(t, "stories260K.gguf")
	opt := Options{Options: exec.Options{Threads: 1}, Piece: 8}
	devs := []Device{{ID: "cpu", Kind: "cpu", Speed: 1}, {ID: "cpu", Kind: "cpu", Speed: 1}}
	if err := MeasureSpeeds(m, devs, opt); err != nil {
		t.Fatal(err)
	}
	if devs[0].Speed == 1 || devs[0].Speed != devs[1].Speed {
		t.Fatalf("speeds %v, %v: want one measured figure for both entries", devs[0].Speed, devs[1].Speed)
	}
	bad := []Device{{ID: "cpu", Kind: "cpu", Speed: 1}, {ID: "tpu:0", Kind: "tpu", Speed: 2}}
	if err := MeasureSpeeds(m, bad, opt); err == nil {
		t.Fatal("a device without a backend measured")
	}
	if bad[0].Speed != 1 || bad[1].Speed != 2 {
		t.Fatalf("speeds changed after a failed measurement: %v, %v", bad[0].Speed, bad[1].Speed)
	}
}
