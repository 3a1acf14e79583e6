// Package jsonenc writes JSON the way sombus shows it everywhere: the
// server's answers, the SDK's requests and the CLI's output.
package jsonenc

import (
	"bytes"
	"encoding/json"
)

// Marshal is json.Marshal without HTML escaping: ">", "<" and "&" are
// written as they are (a topic pattern reads "som.story.>", not
// "som.story.\u003e"), which every JSON parser reads alike. encoding/json
// keeps what a MarshalJSON method returns unescaped when the outer encoder
// does not escape either, so MarshalJSON methods use it too.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
