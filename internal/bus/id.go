package bus

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

// Id prefixes, as the HTTP contract fixes them (audit entries, keys and dead-letter
// cursors use their own).
const (
	PrefixWorkspace  = "w"
	PrefixConnection = "c"
	PrefixUser       = "u"
	PrefixAPIKey     = "k"
	PrefixAudit      = "a"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewID returns prefix followed by 128 random bits in lowercase base32
// (26 characters), more than the 96 bits the HTTP contract asks for.
func NewID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("bus: crypto/rand failed: " + err.Error())
	}
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// ValidID reports whether s looks like an id made by NewID with prefix.
func ValidID(s, prefix string) bool {
	if len(s) != len(prefix)+26 || !strings.HasPrefix(s, prefix) {
		return false
	}
	for _, r := range s[len(prefix):] {
		if !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}
