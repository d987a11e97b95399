package sched

import (
	"testing"

	"github.com/jitllm/jitllm/runtime/cuda/cudatest"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/tune"
)

// GPU stages run here against the stand-in driver (cudatest: every call
// succeeds and computes nothing), in a child process: a prompt pipelined
// in pieces through two and three GPU stages with their rows on the
// devices (and through the host, HostLinks), then decode steps that
// allocate nothing. Only the Go side is checked (the calls, the buffer
// hand-offs, the allocations); TestGPUDeviceLinksMatchHostLinks checks
// the values on a GPU.
func TestStagesStandIn(t *testing.T) {
	cudatest.Run(t, "TestStagesStandIn", "standin_test.go", standInStages)
}

func standInStages(t *testing.T) {
	m := loadModel(t, "stories260K.gguf")
	gpu := Device{ID: "cuda:0", Kind: "cuda", Speed: 1}
	stages := func(devs ...Device) Placement {
		cuts := []int{0, 2, 4, 5}[:len(devs)+1]
		cuts[len(devs)] = 5
		var p Placement
		for i, d := range devs {
			p = append(p, Stage{Device: d, Lo: cuts[i], Hi: cuts[i+1]})
		}
		return p
	}
	cpu := Device{ID: "cpu", Kind: "cpu", Speed: 1}
	for _, c := range []struct {
		pl   Placement
		host bool
		dev  int // links on the devices
	}{
		{stages(gpu, gpu), false, 1},
		{stages(gpu, gpu, gpu), false, 2},
		{stages(gpu, gpu, gpu), true, 0},
		{stages(gpu, gpu, cpu), false, 1},
		{stages(cpu, gpu, gpu), false, 1},
	} {
		opt := Options{Options: exec.Options{Context: 64, Threads: 1, Tune: tune.Off}, Piece: 4, HostLinks: c.host}
		r, err := New(m, c.pl, opt)
		if err != nil {
			t.Fatalf("%s: %v", c.pl.Short(), err)
		}
		dev := 0
		for _, l := range r.links {
			if l.onDevice() {
				dev++
			}
		}
		if dev != c.dev {
			t.Fatalf("%s (host links %v): %d links on the devices, want %d", c.pl.Short(), c.host, dev, c.dev)
		}
		if _, err := r.Forward(prompt); err != nil { // 13 rows: pipelined in 4 pieces
			t.Fatalf("%s: prompt: %v", c.pl.Short(), err)
		}
		if r.Pos() != len(prompt) {
			t.Fatalf("%s: at %d after the prompt of %d", c.pl.Short(), r.Pos(), len(prompt))
		}
		tok := []int32{403}
		n := testing.AllocsPerRun(20, func() {
			if _, err := r.Forward(tok); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s (host links %v): %d device links, prompt pipelined, %.1f allocations a decode step", c.pl.Short(), c.host, dev, n)
		if n != 0 {
			t.Errorf("%s: %.1f allocations a decode step", c.pl.Short(), n)
		}
		r.Close()
	}
	// a list of distinct devices: measured on the model's block 1, placed, opened
	for _, spec := range []string{"cuda:0,cpu", "cpu,cuda:0"} {
		ids, err := ParseList(spec)
		if err != nil {
			t.Fatal(err)
		}
		opt := Options{Options: exec.Options{Context: 64, Threads: 1, Tune: tune.Off}, Piece: 4}
		devs, err := Devices(ids)
		if err != nil {
			t.Fatal(err)
		}
		if err := MeasureSpeeds(m, devs, opt); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		r, err := Open(m, ids, opt, false)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if _, err := r.Forward(prompt); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		t.Logf("%s: measured %s %.3g, %s %.3g weight bytes·rows/s (cuda:0 the stand-in), placed %s", spec, devs[0].ID, devs[0].Speed, devs[1].ID, devs[1].Speed, r.Stages().Short())
		r.Close()
	}
}
