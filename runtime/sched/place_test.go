package sched

import (
	"strings"
	"testing"
)

func evenCosts(blocks int, size int64) Costs {
	c := Costs{Blocks: make([]int64, blocks), Work: make([]float64, blocks), Head: size / 2, Tail: size / 2, TailWork: 0}
	for i := range c.Blocks {
		c.Blocks[i], c.Work[i] = size, float64(size)
	}
	return c
}

func checkCover(t *testing.T, c Costs, p Placement) {
	t.Helper()
	next := 0
	for _, s := range p {
		if s.Lo != next || s.Hi <= s.Lo {
			t.Fatalf("placement %v does not cover the blocks in order", p)
		}
		next = s.Hi
	}
	if next != len(c.Blocks) {
		t.Fatalf("placement %v ends at block %d of %d", p, next, len(c.Blocks))
	}
}

// A model that fits neither device alone is split, each part within its device.
func TestPlaceSplitsWhenOneIsTooSmall(t *testing.T) {
	c := evenCosts(8, 100)
	devs := []Device{
		{ID: "cuda:0", Kind: "cuda", Free: 560, Speed: 10, Fixed: 50},
		{ID: "cpu", Kind: "cpu", Free: 2000, Speed: 1, Fixed: 20},
	}
	p, err := PlaceFewest(c, devs)
	if err != nil {
		t.Fatal(err)
	}
	checkCover(t, c, p)
	if len(p) != 2 || p[0].Device.ID != "cuda:0" || p[1].Device.ID != "cpu" {
		t.Fatalf("placement %v", p)
	}
	for _, s := range p {
		if s.Bytes > s.Device.Free {
			t.Errorf("%s holds %d bytes of %d free", s.Device.ID, s.Bytes, s.Device.Free)
		}
	}
	// The fast device takes all it can hold: 50 fixed + 50 head + 4 blocks.
	if p[0].Hi != 4 {
		t.Errorf("the GPU took blocks [0, %d), want [0, 4)", p[0].Hi)
	}
	// With room for everything on the fast one, it alone runs the model.
	devs[0].Free = 1 << 20
	if p, err = PlaceFewest(c, devs); err != nil || len(p) != 1 || p[0].Device.ID != "cuda:0" {
		t.Fatalf("roomy GPU: %v, %v", p, err)
	}
}

// Listed devices share the blocks in proportion to their speeds.
func TestPlaceProportionalToSpeed(t *testing.T) {
	c := evenCosts(12, 100)
	devs := []Device{
		{ID: "cuda:0", Kind: "cuda", Free: 1 << 30, Speed: 3},
		{ID: "cuda:1", Kind: "cuda", Free: 1 << 30, Speed: 1},
	}
	p, err := Place(c, devs)
	if err != nil {
		t.Fatal(err)
	}
	checkCover(t, c, p)
	if len(p) != 2 || p[0].Hi != 9 {
		t.Fatalf("speeds 3:1 over 12 blocks: %v, want 9 and 3", p)
	}
	// Three devices 2:1:1 over 8 blocks: 4, 2, 2.
	devs = append(devs, Device{ID: "cpu", Kind: "cpu", Free: 1 << 30, Speed: 1})
	devs[0].Speed = 2
	if p, err = Place(evenCosts(8, 100), devs); err != nil {
		t.Fatal(err)
	}
	if len(p) != 3 || p[0].Hi-p[0].Lo != 4 || p[1].Hi-p[1].Lo != 2 || p[2].Hi-p[2].Lo != 2 {
		t.Fatalf("speeds 2:1:1 over 8 blocks: %v", p)
	}
	// Equal speeds, the output head's work on the last: it takes fewer blocks.
	c = evenCosts(8, 100)
	c.TailWork = 200
	devs = devs[:2]
	devs[0].Speed, devs[1].Speed = 1, 1
	if p, err = Place(c, devs); err != nil || p[0].Hi != 5 {
		t.Fatalf("head on the last stage: %v, %v", p, err)
	}
}

func TestPlaceSharedDeviceAndErrors(t *testing.T) {
	c := evenCosts(4, 100)
	// One device listed twice splits its memory: 500 each holds 2 blocks + head or tail.
	two := []Device{{ID: "cpu", Kind: "cpu", Free: 1000, Speed: 1}, {ID: "cpu", Kind: "cpu", Free: 1000, Speed: 1}}
	p, err := Place(c, two)
	if err != nil || len(p) != 2 || p[0].Hi != 2 {
		t.Fatalf("cpu,cpu: %v, %v", p, err)
	}
	two[0].Free, two[1].Free = 400, 400 // 200 each: not even one block with the head
	_, err = Place(c, two)
	if err == nil {
		t.Fatal("placed a model on too little memory")
	}
	for _, want := range []string{"does not fit", "4 blocks take 0.4 KiB", "the largest 0.1 KiB", "cpu 0.2 KiB free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := Place(c, make([]Device, 5)); err == nil || !strings.Contains(err.Error(), "5 devices for 4 blocks") {
		t.Errorf("more devices than blocks: %v", err)
	}
	if _, err := Place(c, []Device{{ID: "cpu", Free: 1 << 20}}); err == nil || !strings.Contains(err.Error(), "speed") {
		t.Errorf("zero speed: %v", err)
	}
	if _, err := PlaceFewest(c, nil); err == nil {
		t.Error("no devices accepted")
	}
}

func TestParseList(t *testing.T) {
	for spec, want := range map[string]string{
		"cuda:0,cuda:1": "cuda:0 cuda:1", "cpu, cuda": "cpu cuda:0", "cpu,cpu": "cpu cpu", "cuda:01": "cuda:1",
	} {
		ids, err := ParseList(spec)
		if err != nil || strings.Join(ids, " ") != want {
			t.Errorf("%q: %v, %v", spec, ids, err)
		}
	}
	for _, bad := range []string{"", "cpu,", "tpu", "cuda:-1", "cuda:x", "cuda:99999"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
