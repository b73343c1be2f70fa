package grpcidempotency

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/resiliencekit/resiliencekit/grpc/internal/httpstatus"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

// The names under which a record keeps a gRPC answer, in its Header.
const (
	codeHeader    = "Grpc-Status-Code"
	messageHeader = "Grpc-Status-Message" // for a message that is not valid UTF-8
	typeHeader    = "Grpc-Message-Type"
	headerPrefix  = "Grpc-Header-"
	trailerPrefix = "Grpc-Trailer-"
)

// record returns the record of a handler's answer: the metadata it set,
// and its status, or its response message and the message's type, with
// the HTTP status that the answer stands for: an error that is not a
// status, as the server tells it (a context's error, wrapped or not, is
// CANCELED or DEADLINE_EXCEEDED). A CANCELED status abandons
// the claim: the key is freed, for the call to run again. A response that
// cannot be marshaled, or none (a handler that returned nil, nil), cannot
// be replayed but may follow a commit: it is stored as incomplete, so that
// the call never runs again and a repeat gets INTERNAL.
func record(claim *idempotency.Claim, sts *capture, resp any, err error, types *sync.Map) idempotency.Record {
	rec := idempotency.Record{Header: sts.stored()}
	if err != nil {
		st, ok := grpcstatus.FromError(err)
		if !ok { // as grpc-go's server answers it: a context's error is CANCELED or DEADLINE_EXCEEDED, not UNKNOWN
			st = grpcstatus.FromContextError(err)
		}
		switch st.Code() {
		case codes.Canceled: // the handler stopped for its caller: nothing committed
			claim.Abandon()
		case codes.Aborted: // gRPC's "retry at a higher level", such as a hop's in progress: not a final answer
			claim.Abandon()
		}
		rec.Body = marshalStatus(st, rec.Header)
		rec.Header.Set(codeHeader, strconv.Itoa(int(st.Code())))
		rec.Status = httpstatus.Of(st.Code())
		return rec
	}
	pm, ok := resp.(proto.Message)
	var body []byte
	if ok {
		body, err = proto.MarshalOptions{Deterministic: true}.Marshal(pm)
	}
	if !ok || err != nil {
		// Cannot be replayed, but the handler may have committed: never run
		// it again; repeats are told its answer could not be kept.
		rec.Status, rec.Incomplete = http.StatusInternalServerError, true
		return rec
	}
	mt := pm.ProtoReflect().Type()
	name := string(mt.Descriptor().FullName())
	types.LoadOrStore(name, mt)
	rec.Header.Set(typeHeader, name)
	rec.Status, rec.Body = http.StatusOK, body
	return rec
}

// marshalStatus returns st in the wire format, for a record whose header
// is h. A message that is not valid UTF-8 (a file name's bytes, which
// grpc-go sends as they are) cannot be in a google.rpc.Status, whose
// message is a proto3 string: it is kept in h, which the stores keep
// byte for byte (idempotency.Record's JSON).
func marshalStatus(st *grpcstatus.Status, h http.Header) []byte {
	p := st.Proto()
	if !utf8.ValidString(p.Message) {
		h.Set(messageHeader, p.Message)
		p.Message = strings.ToValidUTF8(p.Message, "\uFFFD")
	}
	body, err := proto.Marshal(p)
	if err != nil { // a detail's own: the code and message alone
		body, _ = proto.Marshal(&status.Status{Code: p.Code, Message: p.Message})
	}
	return body
}

// replay returns a stored answer without running the handler, with the
// metadata the handler had set, marked as a replay.
func replay(ctx context.Context, rec *idempotency.Record, types *sync.Map) (any, error) {
	code, isStatus := rec.Header[codeHeader]
	name, isMessage := rec.Header[typeHeader]
	if !isStatus && !isMessage {
		return nil, grpcstatus.Error(codes.Internal, "grpcidempotency: stored answer unreadable")
	}
	replayMetadata(ctx, rec.Header)
	if isStatus {
		st := new(status.Status)
		if err := proto.Unmarshal(rec.Body, st); err != nil || len(code) != 1 {
			return nil, grpcstatus.Error(codes.Internal, "grpcidempotency: stored status unreadable")
		}
		if m, ok := rec.Header[messageHeader]; ok {
			st.Message = m[0]
		}
		return nil, grpcstatus.ErrorProto(st)
	}
	mt := messageType(name[0], types)
	if mt == nil {
		return nil, grpcstatus.Errorf(codes.Internal, "grpcidempotency: stored answer of unknown type %s", name[0])
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(rec.Body, m); err != nil {
		return nil, grpcstatus.Error(codes.Internal, "grpcidempotency: stored answer unreadable")
	}
	return m, nil
}

// replayMetadata sets the header and trailer metadata kept in a record's
// header on the call of ctx, and marks the header as a replay.
func replayMetadata(ctx context.Context, stored http.Header) {
	header, trailer := metadata.MD{}, metadata.MD{}
	for k, vs := range stored {
		if n, ok := strings.CutPrefix(k, headerPrefix); ok {
			n = strings.ToLower(n)
			header[n] = unstorable(n, vs)
		} else if n, ok := strings.CutPrefix(k, trailerPrefix); ok {
			n = strings.ToLower(n)
			trailer[n] = unstorable(n, vs)
		}
	}
	header.Set(ReplayedKey, "true")
	_ = grpc.SetHeader(ctx, header)
	if len(trailer) > 0 {
		_ = grpc.SetTrailer(ctx, trailer)
	}
}

// storable returns the values of the metadata key k as a record keeps
// them: a binary key's (k ends in "-bin") base64-encoded, since a store
// may keep only text (the Redis and SQL stores keep JSON).
func storable(k string, vs []string) []string {
	if !strings.HasSuffix(k, "-bin") {
		return vs
	}
	enc := make([]string, len(vs))
	for i, v := range vs {
		enc[i] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return enc
}

// unstorable undoes storable.
func unstorable(k string, vs []string) []string {
	if !strings.HasSuffix(k, "-bin") {
		return vs
	}
	dec := make([]string, 0, len(vs))
	for _, v := range vs {
		if b, err := base64.StdEncoding.DecodeString(v); err == nil {
			dec = append(dec, string(b))
		}
	}
	return dec
}

// messageType finds the message type named name: one seen in an answer,
// a registered Go type, or a dynamic one from a registered descriptor.
func messageType(name string, types *sync.Map) protoreflect.MessageType {
	if mt, ok := types.Load(name); ok {
		return mt.(protoreflect.MessageType)
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name)); err == nil {
		return mt
	}
	if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name)); err == nil {
		if md, ok := d.(protoreflect.MessageDescriptor); ok {
			return dynamicpb.NewMessageType(md)
		}
	}
	return nil
}

// capture passes a handler's header and trailer metadata on to grpc-go,
// keeping a copy for the record of what grpc-go took: metadata it refused
// (a header set or sent after the header went, review159) is not replayed.
type capture struct {
	grpc.ServerTransportStream // nil outside a gRPC server
	mu                         sync.Mutex
	header, trailer            metadata.MD
}

// stored returns the metadata the handler set, as a record's header
// keeps it.
func (c *capture) stored() http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := make(http.Header, len(c.header)+len(c.trailer)+1)
	for k, vs := range c.header {
		h[headerPrefix+k] = storable(k, vs)
	}
	for k, vs := range c.trailer {
		h[trailerPrefix+k] = storable(k, vs)
	}
	return h
}

func (c *capture) Method() string {
	if c.ServerTransportStream == nil {
		return ""
	}
	return c.ServerTransportStream.Method()
}

// pass gives md to grpc-go by send, under a server, and keeps it in *to
// if grpc-go took it.
func (c *capture) pass(send func(grpc.ServerTransportStream, metadata.MD) error, to *metadata.MD, md metadata.MD) error {
	if c.ServerTransportStream != nil {
		if err := send(c.ServerTransportStream, md); err != nil {
			return err
		}
	}
	c.mu.Lock()
	*to = metadata.Join(*to, md)
	c.mu.Unlock()
	return nil
}

func (c *capture) SetHeader(md metadata.MD) error {
	return c.pass(grpc.ServerTransportStream.SetHeader, &c.header, md)
}

func (c *capture) SendHeader(md metadata.MD) error {
	return c.pass(grpc.ServerTransportStream.SendHeader, &c.header, md)
}

func (c *capture) SetTrailer(md metadata.MD) error {
	return c.pass(grpc.ServerTransportStream.SetTrailer, &c.trailer, md)
}
