package discover

import (
	"github.com/jitllm/jitllm/runtime/capabilities"
)

// ReportSchema is the version of the Report's JSON shape.
const ReportSchema = 1

// Report is everything `jitllm doctor` finds.
type Report struct {
	Schema   int          `json:"schema"`
	Version  string       `json:"version,omitempty"`
	Host     Host         `json:"host"`
	Backends []string     `json:"backends"` // compiled in
	Devices  []Device     `json:"devices"`
	APIs     []API        `json:"apis"`
	Model    *ModelReport `json:"model,omitempty"`
	// Problems gathers every device, API and model problem, errors first.
	Problems []Problem `json:"problems"`
	// OK is false when a requested model cannot run (the exit status of doctor).
	OK bool `json:"ok"`
}

// Doctor probes the host and its devices and, when model is not empty,
// checks it against them.
func Doctor(model string, opt Options) Report {
	h := HostInfo()
	devs, apis := Devices(h)
	r := Report{Schema: ReportSchema, Host: h, Devices: devs, APIs: apis, OK: true, Backends: []string{}}
	for _, b := range capabilities.Get().Backends {
		r.Backends = append(r.Backends, b.Name)
	}
	var ps []Problem
	for _, d := range devs {
		ps = append(ps, d.Problems...)
	}
	for _, a := range apis {
		if a.Problem != nil {
			ps = append(ps, *a.Problem)
		}
	}
	if model != "" {
		m := CheckModel(model, devs, opt)
		r.Model = &m
		r.OK = m.CanRun
		ps = append(ps, m.Problems...)
	}
	r.Problems = []Problem{}
	for _, sev := range []string{SevError, SevWarning, SevInfo} {
		for _, p := range ps {
			if p.Severity == sev {
				r.Problems = append(r.Problems, p)
			}
		}
	}
	return r
}
