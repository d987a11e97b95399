// Package control is jitllmd's control plane ("Connect API"): Connect
// services for models (list, load, unload), devices (list, placement) and
// named sessions (create, park, resume, delete), over the registry of a
// server.Server and mounted on its mux, so they share the HTTP API's port.
// The protocol is in proto/jitllm/control/v1/control.proto; its Go code in
// gen/ is generated (scripts/gen-proto.sh) and checked by `make test`.
package control

//go:generate ../../scripts/gen-proto.sh

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jitllm/jitllm/runtime/discover"
	"github.com/jitllm/jitllm/server"
	controlv1 "github.com/jitllm/jitllm/server/control/gen/jitllm/control/v1"
	"github.com/jitllm/jitllm/server/control/gen/jitllm/control/v1/controlv1connect"
)

// maxMessage bounds a request message: the largest legitimate one is a
// file path and an id.
const maxMessage = 64 << 10

// maxGrace bounds an unload's or a move's grace period.
const maxGrace = time.Hour

// Register mounts the three services on srv's mux.
func Register(srv *server.Server) {
	c := &Control{srv: srv, devices: hostDevices}
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxMessage)}
	srv.Handle(controlv1connect.NewModelServiceHandler(c, opts...))
	srv.Handle(controlv1connect.NewDeviceServiceHandler(c, opts...))
	srv.Handle(controlv1connect.NewSessionServiceHandler(c, opts...))
}

// Control implements the services over a server's registry.
type Control struct {
	srv     *server.Server
	devices func() []discover.Device
}

func hostDevices() []discover.Device {
	devs, _ := discover.Devices(discover.HostInfo())
	return devs
}

// codeOf maps the registry's error classes to Connect codes.
func codeOf(err error) connect.Code {
	switch {
	case errors.Is(err, server.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, server.ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, server.ErrExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, server.ErrNoMemory):
		return connect.CodeResourceExhausted
	case errors.Is(err, server.ErrPrecondition):
		return connect.CodeFailedPrecondition
	case errors.Is(err, server.ErrPermission):
		return connect.CodePermissionDenied
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}

func fail(err error) error { return connect.NewError(codeOf(err), err) }

func invalid(msg string) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
}

// grace reads an optional grace period: unset is server.DefaultGrace.
func grace(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return server.DefaultGrace, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid("grace: " + err.Error())
	}
	g := d.AsDuration()
	if g < 0 || g > maxGrace {
		return 0, invalid("grace must be between 0 and 1h")
	}
	return g, nil
}

func modelPB(m server.ModelInfo) *controlv1.Model {
	return &controlv1.Model{Id: m.ID, Path: m.Path, Family: m.Family, QuantTypes: m.QuantTypes, Device: m.Device,
		Context: int32(m.Context), Slots: int32(m.Slots), SlotsInUse: int32(m.SlotsInUse), Sessions: int32(m.Sessions),
		Parameters: m.Parameters, Blocks: int32(m.Blocks),
		Memory: &controlv1.Memory{WeightsBytes: m.Memory.Weights, KvBytes: m.Memory.KV, ActivationsBytes: m.Memory.Activations, TotalBytes: m.Memory.Total}}
}

func (c *Control) ListModels(_ context.Context, _ *connect.Request[controlv1.ListModelsRequest]) (*connect.Response[controlv1.ListModelsResponse], error) {
	out := &controlv1.ListModelsResponse{}
	for _, m := range c.srv.Infos() {
		out.Models = append(out.Models, modelPB(m))
	}
	return connect.NewResponse(out), nil
}

func (c *Control) LoadModel(ctx context.Context, req *connect.Request[controlv1.LoadModelRequest]) (*connect.Response[controlv1.LoadModelResponse], error) {
	r := req.Msg
	m, err := c.srv.LoadModel(ctx, server.LoadSpec{Path: r.Path, ID: r.Id, Devices: r.Devices, Context: int(r.Context)})
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&controlv1.LoadModelResponse{Model: modelPB(m)}), nil
}

func (c *Control) UnloadModel(_ context.Context, req *connect.Request[controlv1.UnloadModelRequest]) (*connect.Response[controlv1.UnloadModelResponse], error) {
	g, err := grace(req.Msg.Grace)
	if err != nil {
		return nil, err
	}
	res, err := c.srv.UnloadModel(req.Msg.Id, g)
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&controlv1.UnloadModelResponse{CancelledRequests: int32(res.Cancelled), DeletedSessions: int32(res.Sessions)}), nil
}

func (c *Control) ListDevices(_ context.Context, _ *connect.Request[controlv1.ListDevicesRequest]) (*connect.Response[controlv1.ListDevicesResponse], error) {
	out := &controlv1.ListDevicesResponse{}
	for _, d := range c.devices() {
		pd := &controlv1.Device{Id: d.ID, Kind: d.Kind, Name: d.Name, MemTotalBytes: d.MemTotal, MemFreeBytes: d.MemFree,
			ComputeCapability: d.ComputeCapability, Driver: d.Driver, Backends: d.Backends}
		for _, p := range d.Problems {
			pd.Problems = append(pd.Problems, &controlv1.Problem{Severity: p.Severity, Message: p.Message, Action: p.Action})
		}
		out.Devices = append(out.Devices, pd)
	}
	return connect.NewResponse(out), nil
}

func placementPB(p server.Placement) *controlv1.Placement {
	out := &controlv1.Placement{ModelId: p.ModelID, Device: p.Device}
	for _, b := range p.Blocks {
		out.Blocks = append(out.Blocks, &controlv1.BlockPlacement{Block: b.Block, Device: b.Device})
	}
	return out
}

func (c *Control) GetPlacement(_ context.Context, req *connect.Request[controlv1.GetPlacementRequest]) (*connect.Response[controlv1.GetPlacementResponse], error) {
	ids := []string{req.Msg.ModelId}
	if req.Msg.ModelId == "" {
		ids = c.srv.Models()
	}
	out := &controlv1.GetPlacementResponse{}
	for _, id := range ids {
		p, err := c.srv.Placement(id)
		if err != nil {
			if req.Msg.ModelId == "" && errors.Is(err, server.ErrNotFound) {
				continue // unloaded since Models
			}
			return nil, fail(err)
		}
		out.Placements = append(out.Placements, placementPB(p))
	}
	return connect.NewResponse(out), nil
}

func (c *Control) PlaceModel(_ context.Context, req *connect.Request[controlv1.PlaceModelRequest]) (*connect.Response[controlv1.PlaceModelResponse], error) {
	r := req.Msg
	if r.ModelId == "" {
		return nil, invalid("model_id is required")
	}
	if r.Device == "" {
		return nil, invalid("device is required (cpu, cuda, cuda:0, auto)")
	}
	g, err := grace(r.Grace)
	if err != nil {
		return nil, err
	}
	p, err := c.srv.Place(r.ModelId, r.Device, g)
	if err != nil {
		return nil, fail(err)
	}
	out := &controlv1.PlaceModelResponse{Placement: placementPB(p)}
	if m, err := c.srv.Info(r.ModelId); err == nil {
		out.Model = modelPB(m)
	}
	return connect.NewResponse(out), nil
}

var statePB = map[string]controlv1.SessionState{
	server.SessionActive: controlv1.SessionState_SESSION_STATE_ACTIVE,
	server.SessionBusy:   controlv1.SessionState_SESSION_STATE_BUSY,
	server.SessionParked: controlv1.SessionState_SESSION_STATE_PARKED,
}

func sessionPB(s server.SessionInfo) *controlv1.Session {
	return &controlv1.Session{Id: s.ID, ModelId: s.ModelID, State: statePB[s.State], Tokens: int32(s.Tokens), Bytes: s.Bytes,
		CreatedUnix: s.Created.Unix(), LastUsedUnix: s.LastUsed.Unix()}
}

func (c *Control) CreateSession(ctx context.Context, req *connect.Request[controlv1.CreateSessionRequest]) (*connect.Response[controlv1.CreateSessionResponse], error) {
	if req.Msg.ModelId == "" {
		return nil, invalid("model_id is required")
	}
	s, err := c.srv.CreateSession(ctx, req.Msg.ModelId)
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&controlv1.CreateSessionResponse{Session: sessionPB(s)}), nil
}

func (c *Control) GetSession(_ context.Context, req *connect.Request[controlv1.GetSessionRequest]) (*connect.Response[controlv1.GetSessionResponse], error) {
	s, err := c.srv.GetSession(req.Msg.Id)
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&controlv1.GetSessionResponse{Session: sessionPB(s)}), nil
}

func (c *Control) ListSessions(_ context.Context, req *connect.Request[controlv1.ListSessionsRequest]) (*connect.Response[controlv1.ListSessionsResponse], error) {
	out := &controlv1.ListSessionsResponse{}
	for _, s := range c.srv.Sessions(req.Msg.ModelId) {
		out.Sessions = append(out.Sessions, sessionPB(s))
	}
	return connect.NewResponse(out), nil
}

func (c *Control) ParkSession(_ context.Context, req *connect.Request[controlv1.ParkSessionRequest]) (*connect.Response[controlv1.ParkSessionResponse], error) {
	s, err := c.srv.ParkSession(req.Msg.Id)
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&controlv1.ParkSessionResponse{Session: sessionPB(s)}), nil
}

func (c *Control) ResumeSession(ctx context.Context, req *connect.Request[controlv1.ResumeSessionRequest]) (*connect.Response[controlv1.ResumeSessionResponse], error) {
	s, err := c.srv.ResumeSession(ctx, req.Msg.Id)
	if err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&controlv1.ResumeSessionResponse{Session: sessionPB(s)}), nil
}

func (c *Control) DeleteSession(_ context.Context, req *connect.Request[controlv1.DeleteSessionRequest]) (*connect.Response[controlv1.DeleteSessionResponse], error) {
	if err := c.srv.DeleteSession(req.Msg.Id); err != nil {
		return nil, fail(err)
	}
	return connect.NewResponse(&controlv1.DeleteSessionResponse{}), nil
}
