// Package httpstatus maps gRPC codes to the HTTP statuses they stand for,
// as google.rpc.Code documents them: the one mapping that
// grpcsignal.HTTPStatus gives its users and grpcidempotency stores in a
// record.
package httpstatus

import (
	"net/http"

	"google.golang.org/grpc/codes"
)

// Of returns the HTTP status that c stands for: OK 200; INVALID_ARGUMENT,
// FAILED_PRECONDITION and OUT_OF_RANGE 400; UNAUTHENTICATED 401;
// PERMISSION_DENIED 403; NOT_FOUND 404; ALREADY_EXISTS and ABORTED 409;
// RESOURCE_EXHAUSTED 429; CANCELED 499; UNIMPLEMENTED 501; UNAVAILABLE
// 503; DEADLINE_EXCEEDED 504; the rest (UNKNOWN, INTERNAL, DATA_LOSS,
// codes past the 16) 500.
func Of(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
