package cuda

// Stream is an ordered queue of device work.
type Stream struct{ s uintptr }

// NewStream creates a non-blocking stream.
func (c *Context) NewStream() (*Stream, error) {
	var s uintptr
	if err := check("cuStreamCreate", api.cuStreamCreate(&s, 1)); err != nil {
		return nil, err
	}
	return &Stream{s}, nil
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return check("cuStreamSynchronize", api.cuStreamSynchronize(s.s))
}

// Destroy frees the stream.
func (s *Stream) Destroy() error { return check("cuStreamDestroy", api.cuStreamDestroy(s.s)) }

// Graph is a captured sequence of launches replayed with one call: a decode
// step is captured once per shape and replayed for every token.
type Graph struct{ g, exec uintptr }

// Capture records what fn enqueues on s into a graph.
func (s *Stream) Capture(fn func() error) (*Graph, error) {
	const relaxed = 2 // CU_STREAM_CAPTURE_MODE_RELAXED
	if err := check("cuStreamBeginCapture", api.cuStreamBeginCapture(s.s, relaxed)); err != nil {
		return nil, err
	}
	ferr := fn()
	var g uintptr
	if err := check("cuStreamEndCapture", api.cuStreamEndCapture(s.s, &g)); err != nil {
		return nil, err
	}
	if ferr != nil {
		api.cuGraphDestroy(g)
		return nil, ferr
	}
	out := &Graph{g: g}
	if err := check("cuGraphInstantiate", api.cuGraphInstantiate(&out.exec, g, 0)); err != nil {
		api.cuGraphDestroy(g)
		return nil, err
	}
	return out, nil
}

// Launch replays the graph on s.
func (g *Graph) Launch(s *Stream) error {
	return check("cuGraphLaunch", api.cuGraphLaunch(g.exec, s.s))
}

// Destroy frees the graph.
func (g *Graph) Destroy() error {
	api.cuGraphExecDestroy(g.exec)
	return check("cuGraphDestroy", api.cuGraphDestroy(g.g))
}

// Event marks a point in a stream, for timing.
type Event struct{ e uintptr }

// NewEvent creates a timing event.
func (c *Context) NewEvent() (*Event, error) {
	var e uintptr
	if err := check("cuEventCreate", api.cuEventCreate(&e, 0)); err != nil {
		return nil, err
	}
	return &Event{e}, nil
}

// Record marks the event on s.
func (e *Event) Record(s *Stream) error {
	var sp uintptr
	if s != nil {
		sp = s.s
	}
	return check("cuEventRecord", api.cuEventRecord(e.e, sp))
}

// Synchronize waits for the event.
func (e *Event) Synchronize() error { return check("cuEventSynchronize", api.cuEventSynchronize(e.e)) }

// Since returns the milliseconds from start to e (both recorded and done).
func (e *Event) Since(start *Event) (float32, error) {
	var ms float32
	return ms, check("cuEventElapsedTime", api.cuEventElapsedTime(&ms, start.e, e.e))
}

// Destroy frees the event.
func (e *Event) Destroy() error { return check("cuEventDestroy", api.cuEventDestroy(e.e)) }
