// Package spec builds sombus's OpenAPI document. The document is written to
// internal/openapi/openapi.json by `go generate ./internal/openapi`; a test in
// package openapi checks that the file and this builder agree.
package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// obj is a JSON object that keeps the order its keys were written in, so the
// generated document reads top-down the way it was authored.
type obj []kv

type kv struct {
	k string
	v any
}

// o builds an obj from alternating keys and values. A nil value leaves its
// key out, which keeps optional fields easy to write.
func o(pairs ...any) obj {
	if len(pairs)%2 != 0 {
		panic(fmt.Sprintf("spec: odd number of arguments to o: %v", pairs))
	}
	out := make(obj, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		k, ok := pairs[i].(string)
		if !ok {
			panic(fmt.Sprintf("spec: key %v is not a string", pairs[i]))
		}
		if isNil(pairs[i+1]) {
			continue
		}
		out = append(out, kv{k, pairs[i+1]})
	}
	return out
}

func isNil(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case obj:
		return x == nil
	case []obj:
		return x == nil
	}
	return false
}

// with returns a copy of x with the pairs added (or replaced).
func (x obj) with(pairs ...any) obj {
	out := append(obj(nil), x...)
	for _, p := range o(pairs...) {
		replaced := false
		for i := range out {
			if out[i].k == p.k {
				out[i].v = p.v
				replaced = true
			}
		}
		if !replaced {
			out = append(out, p)
		}
	}
	return out
}

func (x obj) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, p := range x {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := encode(&buf, p.k); err != nil {
			return nil, err
		}
		buf.WriteByte(':')
		if err := encode(&buf, p.v); err != nil {
			return nil, fmt.Errorf("%s: %w", p.k, err)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func encode(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	return nil
}

// JSON returns the document, pretty-printed with two-space indents and a
// final newline.
func JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(document()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
