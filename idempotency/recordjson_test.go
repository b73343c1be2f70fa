package idempotency_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A record in JSON, as the Redis and SQL stores keep it, keeps header
// values byte for byte, also those that are not valid UTF-8 (review105),
// and a record whose header is valid UTF-8 is written as before.
func TestRecordJSON(t *testing.T) {
	type plain idempotency.Record // the encoding before MarshalJSON
	tests := []struct {
		name   string
		header http.Header
		same   bool // written as plain
	}{
		{"no header", nil, true},
		{"valid", http.Header{"Content-Type": {"text/plain"}, "X-Name": {"café"}}, true},
		{"latin-1 file name", http.Header{"Content-Disposition": {`attachment; filename="caf` + "\xe9" + `.txt"`}, "Content-Type": {"text/plain"}}, false},
		{"one of two values", http.Header{"X-Many": {"ok", "\xff\xfe", ""}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := idempotency.Record{Fingerprint: "fp", Token: "t", Done: true, Status: 201, Header: tc.header, Body: []byte("\xff body")}
			data, err := json.Marshal(rec)
			require.NoError(t, err)
			old, err := json.Marshal(plain(rec))
			require.NoError(t, err)
			if tc.same {
				assert.Equal(t, string(old), string(data))
			} else {
				assert.NotEqual(t, string(old), string(data))
			}
			var got idempotency.Record
			require.NoError(t, json.Unmarshal(data, &got))
			assert.Equal(t, rec, got)
			var fromPointer idempotency.Record
			data, err = json.Marshal(&rec)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(data, &fromPointer))
			assert.Equal(t, rec, fromPointer)
		})
	}
	var bad idempotency.Record
	assert.Error(t, json.Unmarshal([]byte(`{"header64":{"X":["not base64!"]}}`), &bad))
	assert.Error(t, json.Unmarshal([]byte(`{"status":"x"}`), &bad))
}
