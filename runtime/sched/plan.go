package sched

import (
	"fmt"

	"github.com/jitllm/jitllm/runtime/discover"
	"github.com/jitllm/jitllm/runtime/exec"
)

// PlanOn places m on devs (Place, or PlaceFewest with fewest) for opt's
// context, then checks each stage against its backend's own estimate of
// the stage graph, so a placement that fits by Costs but not by the plan
// the backend will make is refused before anything is allocated.
func PlanOn(m *exec.Model, devs []Device, opt Options, fewest bool) (Placement, error) {
	ctx := opt.Context
	if ctx <= 0 {
		ctx = m.ContextLength()
		if ctx <= 0 || ctx > 4096 {
			ctx = 4096
		}
	}
	piece := opt.Piece
	if piece <= 0 {
		piece = DefaultPiece
	}
	c, err := CostsOf(m, ctx)
	if err != nil {
		return nil, err
	}
	devs = append([]Device(nil), devs...)
	if err := SetFixed(c, m, devs, ctx, piece); err != nil {
		return nil, err
	}
	var pl Placement
	if fewest {
		pl, err = PlaceFewest(c, devs)
	} else {
		pl, err = Place(c, devs)
	}
	if err != nil {
		return nil, err
	}
	share := map[string]int{}
	for _, s := range pl {
		share[s.Device.ID]++
	}
	for _, s := range pl {
		sm, err := m.Stage(s.Lo, s.Hi)
		if err != nil {
			return nil, err
		}
		need, err := Estimate(s.Device.Kind, sm, ctx, piece)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Device.ID, err)
		}
		if avail := s.Device.Free / int64(share[s.Device.ID]); need > avail {
			return nil, fmt.Errorf("blocks %d-%d need %s on %s, which offers %s", s.Lo, s.Hi-1, discover.GiB(need), s.Device.ID, discover.GiB(avail))
		}
	}
	return pl, nil
}

// Open places m on the devices ids name (ParseList) and plans the stages:
// every listed device takes a share of the blocks in proportion to its
// speed (for a list of distinct devices, measured on one of m's own blocks:
// MeasureSpeeds), or with fewest only as many devices as the model's size
// needs.
func Open(m *exec.Model, ids []string, opt Options, fewest bool) (*Runner, error) {
	devs, err := Devices(ids)
	if err != nil {
		return nil, err
	}
	if !fewest && distinct(ids) > 1 {
		if err := MeasureSpeeds(m, devs, opt); err != nil {
			Warnf("placing by memory bandwidth: %v", err)
		}
	}
	pl, err := PlanOn(m, devs, opt, fewest)
	if err != nil {
		return nil, err
	}
	return New(m, pl, opt)
}

// distinct is the number of different devices ids name.
func distinct(ids []string) int {
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	return len(seen)
}
