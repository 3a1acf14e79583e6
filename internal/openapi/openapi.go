// Package openapi holds sombus's OpenAPI 3.1 document, the machine-readable
// description of every HTTP route, and serves it at GET /v1/openapi.json.
//
// openapi.json is generated from internal/spec; edit the builder there and
// run `go generate ./internal/openapi`. A test checks the two agree.
package openapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	_ "embed"
)

//go:generate go run ./internal/spec/gen -o openapi.json

// Document is the OpenAPI document (JSON).
//
//go:embed openapi.json
var Document []byte

var etag = func() string {
	sum := sha256.Sum256(Document)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}()

// Handler serves Document with Content-Type application/json. It answers
// GET and HEAD (with an ETag, honouring If-None-Match); routing other
// methods to a 405 is the server's router's job.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", etag)
		http.ServeContent(w, r, "openapi.json", time.Time{}, bytes.NewReader(Document))
	})
}
