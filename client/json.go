package client

import (
	"bytes"
	"encoding/json"
)

// marshal is json.Marshal without HTML escaping: ">", "<" and "&" are
// written as they are, as the bus writes them, so printed messages read
// "som.story.>" rather than "som.story.\u003e".
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
