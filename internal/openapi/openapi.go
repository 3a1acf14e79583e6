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
	"encoding/json"
	"net/http"
	"time"

	_ "embed"
)

//go:generate go run ./internal/spec/gen -o openapi.json

// Document is the OpenAPI document (JSON).
//
//go:embed openapi.json
var Document []byte

// WithServer returns Document with its servers set to the one server at
// publicURL (a node's --public-url, the base URL its paths start from), so
// that tools generating clients from the document call that node. The
// document in the repository names no server: only a running node knows its
// address. An empty publicURL gives Document as it is.
func WithServer(publicURL string) []byte {
	if publicURL == "" {
		return Document
	}
	var servers bytes.Buffer
	enc := json.NewEncoder(&servers)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	err := enc.Encode([]map[string]string{{
		"url":         publicURL,
		"description": "This node, as its --public-url names it.",
	}})
	// The top-level "info" member follows "openapi": the servers go between.
	at := bytes.Index(Document, []byte(`"info":`))
	if err != nil || at < 0 {
		return Document
	}
	out := make([]byte, 0, len(Document)+servers.Len()+16)
	out = append(out, Document[:at]...)
	out = append(out, `"servers": `...)
	out = append(out, bytes.TrimSuffix(servers.Bytes(), []byte("\n"))...)
	out = append(out, ",\n  "...)
	return append(out, Document[at:]...)
}

// Handler serves WithServer(publicURL) with Content-Type application/json.
// It answers GET and HEAD (with an ETag, honouring If-None-Match); routing
// other methods to a 405 is the server's router's job.
func Handler(publicURL string) http.Handler {
	doc := WithServer(publicURL)
	sum := sha256.Sum256(doc)
	etag := `"` + hex.EncodeToString(sum[:12]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", etag)
		http.ServeContent(w, r, "openapi.json", time.Time{}, bytes.NewReader(doc))
	})
}
