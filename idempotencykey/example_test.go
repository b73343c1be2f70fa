package idempotencykey_test

import (
	"fmt"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// A server reads the key of a request, bare or as a structured-field
// string.
func ExampleParse() {
	for _, v := range []string{"order-42", `"order \"42\""`, "a key with spaces"} {
		key, err := idempotencykey.Parse(v)
		fmt.Printf("%q %v\n", key, err)
	}
	// Output:
	// "order-42" <nil>
	// "order \"42\"" <nil>
	// "" invalid idempotency key
}
