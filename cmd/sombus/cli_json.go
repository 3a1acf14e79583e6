package main

import (
	"bytes"
	"encoding/json"
)

// marshalJSON is json.Marshal without HTML escaping: what the CLI prints or
// sends shows ">", "<" and "&" as they are ("som.story.>"), as the bus does.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
