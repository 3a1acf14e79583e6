package bus

import (
	"bytes"
	"encoding/json"
	"time"
)

// The API shows every time as RFC 3339 UTC with milliseconds
// ("2026-09-25T10:15:02.114Z"); time.Time's own JSON drops zero
// milliseconds, so the types the API shows marshal their times here. Each
// method shadows the time fields with strings of the same JSON name (the
// shallower field wins in encoding/json).

// marshal is json.Marshal without HTML escaping: the API writes ">", "<"
// and "&" as they are (a topic pattern reads "som.story.>", not
// "som.story.\u003e"), which every JSON parser reads alike. Every MarshalJSON
// method here uses it; encoding/json keeps what a MarshalJSON method returns
// unescaped when the outer encoder does not escape either.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// TimeFormat is the layout of every time the API shows.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime formats t as the API shows times.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

func optTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := FormatTime(*t)
	return &s
}

// MarshalJSON shows times with milliseconds.
func (u User) MarshalJSON() ([]byte, error) {
	type alias User
	return marshal(struct {
		alias
		CreatedAt string `json:"created_at"`
	}{alias(u), FormatTime(u.CreatedAt)})
}

// MarshalJSON shows times with milliseconds.
func (w Workspace) MarshalJSON() ([]byte, error) {
	type alias Workspace
	return marshal(struct {
		alias
		CreatedAt string `json:"created_at"`
	}{alias(w), FormatTime(w.CreatedAt)})
}

// MarshalJSON shows times with milliseconds.
func (e AuditEntry) MarshalJSON() ([]byte, error) {
	type alias AuditEntry
	d := e.Details
	if d == nil {
		d = map[string]any{}
	}
	return marshal(struct {
		alias
		At      string         `json:"at"`
		Details map[string]any `json:"details"`
	}{alias(e), FormatTime(e.At), d})
}

// MarshalJSON shows times with milliseconds.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	type alias DeadLetter
	return marshal(struct {
		alias
		EnqueuedAt     string `json:"enqueued_at"`
		DeadLetteredAt string `json:"dead_lettered_at"`
	}{alias(d), FormatTime(d.EnqueuedAt), FormatTime(d.DeadLetteredAt)})
}

// MarshalJSON shows times with milliseconds.
func (s Skills) MarshalJSON() ([]byte, error) {
	type alias Skills
	regs := s.Registrations
	if regs == nil {
		regs = []SkillRegistration{}
	}
	return marshal(struct {
		alias
		Registrations []SkillRegistration `json:"registrations"`
		UpdatedAt     *string             `json:"updated_at"`
	}{alias(s), regs, optTimeNonZero(s.UpdatedAt)})
}

func optTimeNonZero(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return optTime(&t)
}

// MarshalJSON shows times with milliseconds.
func (v SecretView) MarshalJSON() ([]byte, error) {
	type alias SecretView
	return marshal(struct {
		alias
		IssuedAt          *string `json:"issued_at"`
		PreviousExpiresAt *string `json:"previous_expires_at"`
	}{alias(v), optTime(v.IssuedAt), optTime(v.PreviousExpiresAt)})
}

// MarshalJSON shows times with milliseconds.
func (v ConnectionView) MarshalJSON() ([]byte, error) {
	type alias ConnectionView
	return marshal(struct {
		alias
		CreatedAt string `json:"created_at"`
	}{alias(v), FormatTime(v.CreatedAt)})
}

// MarshalJSON shows times with milliseconds.
func (v APIKeyView) MarshalJSON() ([]byte, error) {
	type alias APIKeyView
	return marshal(struct {
		alias
		CreatedAt string `json:"created_at"`
	}{alias(v), FormatTime(v.CreatedAt)})
}
