package cuda

// Stream is an ordered queue of device work.
type Stream struct {
	s uintptr
	c *Context
}

// NewStream creates a non-blocking stream.
func (c *Context) NewStream() (*Stream, error) {
	defer c.enter()()
	var s uintptr
	if err := check("cuStreamCreate", api.cuStreamCreate(&s, 1)); err != nil {
		return nil, err
	}
	return &Stream{s, c}, nil
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return check("cuStreamSynchronize", ccall(hot.cuStreamSynchronize, 1, [11]uintptr{s.s}))
}

// Wait makes the work enqueued on s after it wait for the work before e's
// latest record (cuStreamWaitEvent): how a second stream forks from another
// and joins it again, in a captured graph as on live streams.
func (s *Stream) Wait(e *Event) error {
	defer s.c.enter()()
	return check("cuStreamWaitEvent", ccall(hot.cuStreamWaitEvent, 3, [11]uintptr{s.s, e.e, 0}))
}

// Destroy frees the stream.
func (s *Stream) Destroy() error {
	defer s.c.enter()()
	return check("cuStreamDestroy", api.cuStreamDestroy(s.s))
}

// Graph is a captured sequence of launches replayed with one call: a decode
// step is captured once per shape and replayed for every token.
type Graph struct {
	g, exec uintptr
	c       *Context
}

// Capture records what fn enqueues on s into a graph.
func (s *Stream) Capture(fn func() error) (*Graph, error) {
	const relaxed = 2 // CU_STREAM_CAPTURE_MODE_RELAXED
	// The whole capture stays on one thread: capture state is per thread.
	defer s.c.enter()()
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
	out := &Graph{g: g, c: s.c}
	if err := check("cuGraphInstantiate", api.cuGraphInstantiate(&out.exec, g, 0)); err != nil {
		api.cuGraphDestroy(g)
		return nil, err
	}
	return out, nil
}

// Launch replays the graph on s.
func (g *Graph) Launch(s *Stream) error {
	return check("cuGraphLaunch", ccall(hot.cuGraphLaunch, 2, [11]uintptr{g.exec, s.s}))
}

// Destroy frees the graph.
func (g *Graph) Destroy() error {
	defer g.c.enter()()
	api.cuGraphExecDestroy(g.exec)
	return check("cuGraphDestroy", api.cuGraphDestroy(g.g))
}

// Event marks a point in a stream: for timing, and for another stream to
// wait on (Stream.Wait).
type Event struct {
	e uintptr
	c *Context
}

// NewEvent creates a timing event.
func (c *Context) NewEvent() (*Event, error) {
	defer c.enter()()
	var e uintptr
	if err := check("cuEventCreate", api.cuEventCreate(&e, 0)); err != nil {
		return nil, err
	}
	return &Event{e, c}, nil
}

// Record marks the event on s.
func (e *Event) Record(s *Stream) error {
	var sp uintptr
	if s != nil {
		sp = s.s
	}
	defer e.c.enter()()
	return check("cuEventRecord", ccall(hot.cuEventRecord, 2, [11]uintptr{e.e, sp}))
}

// Synchronize waits for the event.
func (e *Event) Synchronize() error {
	defer e.c.enter()()
	return check("cuEventSynchronize", api.cuEventSynchronize(e.e))
}

// Since returns the milliseconds from start to e (both recorded and done).
func (e *Event) Since(start *Event) (float32, error) {
	defer e.c.enter()()
	var ms float32
	return ms, check("cuEventElapsedTime", api.cuEventElapsedTime(&ms, start.e, e.e))
}

// Destroy frees the event.
func (e *Event) Destroy() error {
	defer e.c.enter()()
	return check("cuEventDestroy", api.cuEventDestroy(e.e))
}
