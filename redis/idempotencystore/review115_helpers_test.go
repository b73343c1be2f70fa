package idempotencystore_test

import (
	"crypto/sha256"
	"encoding/hex"
)

// scoped is the key as the guard stores it (idempotency's scopeKey).
func scoped(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:16]) + ":" + key
}
