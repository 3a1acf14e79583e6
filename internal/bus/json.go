package bus

import (
	"time"

	"github.com/sombus/sombus/internal/jsonenc"
)

// The API shows every time as RFC 3339 UTC with milliseconds
// ("2026-09-25T10:15:02.114Z"); time.Time's own JSON drops zero
// milliseconds, so the types the API shows marshal their times here. Each
// method shadows the time fields with strings of the same JSON name (the
// shallower field wins in encoding/json), and writes ">", "<" and "&" as
// they are (jsonenc.Marshal).

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
	return jsonenc.Marshal(struct {
		alias
		CreatedAt string `json:"created_at"`
	}{alias(u), FormatTime(u.CreatedAt)})
}

// MarshalJSON shows times with milliseconds.
func (w Workspace) MarshalJSON() ([]byte, error) {
	type alias Workspace
	return jsonenc.Marshal(struct {
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
	return jsonenc.Marshal(struct {
		alias
		At      string         `json:"at"`
		Details map[string]any `json:"details"`
	}{alias(e), FormatTime(e.At), d})
}

// MarshalJSON shows times with milliseconds.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	type alias DeadLetter
	return jsonenc.Marshal(struct {
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
	return jsonenc.Marshal(struct {
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
	return jsonenc.Marshal(struct {
		alias
		IssuedAt          *string `json:"issued_at"`
		PreviousExpiresAt *string `json:"previous_expires_at"`
	}{alias(v), optTime(v.IssuedAt), optTime(v.PreviousExpiresAt)})
}

// MarshalJSON shows times with milliseconds.
func (v ConnectionView) MarshalJSON() ([]byte, error) {
	type alias ConnectionView
	return jsonenc.Marshal(struct {
		alias
		CreatedAt string `json:"created_at"`
	}{alias(v), FormatTime(v.CreatedAt)})
}

// MarshalJSON shows times with milliseconds.
func (v APIKeyView) MarshalJSON() ([]byte, error) {
	type alias APIKeyView
	return jsonenc.Marshal(struct {
		alias
		CreatedAt string `json:"created_at"`
	}{alias(v), FormatTime(v.CreatedAt)})
}
