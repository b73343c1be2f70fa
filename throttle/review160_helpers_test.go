package throttle_test

import "context"

func contextCanceled() error { return context.Canceled }
