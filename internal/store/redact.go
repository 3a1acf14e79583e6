package store

import (
	"net/url"
	"regexp"
	"strings"
)

// redactMask stands in a redacted store value for each secret it held.
const redactMask = "***"

// Redact returns a --store value as a log line may show it: every place
// where libpq and pgx take a password from is masked. In a postgres:// URL
// that is the user information's password and the query's password and
// sslpassword parameters (whatever their percent-encoding). A SQLite
// value holds no secret and is returned as it is; any other value (which
// ParseSpec refuses) is masked whole. The masking errs
// on the side of hiding too much when the value is malformed (an unencoded
// "/" or "@" in a password): it then hides what stands between a ":" and
// an "@" as well.
func Redact(spec string) string {
	if strings.HasPrefix(spec, "sqlite:") {
		return spec
	}
	prefix := ""
	for _, p := range []string{"postgresql://", "postgres://"} {
		if strings.HasPrefix(spec, p) {
			prefix = p
			break
		}
	}
	if prefix == "" {
		return redactMask
	}
	rest := spec[len(prefix):]
	var b strings.Builder
	b.WriteString(prefix)
	// libpq's rule: the user information is what stands before an "@"
	// met before any "/".
	userinfo := false
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, _, hasPassword := strings.Cut(rest[:i], ":")
		rest = rest[i+1:]
		// A password holding an unencoded "@" leaves part of it before
		// the host's own "@": hide up to the authority's last "@".
		authority := rest
		if j := strings.IndexAny(authority, "/?"); j >= 0 {
			authority = authority[:j]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			rest = rest[at+1:]
			hasPassword = true
		}
		b.WriteString(user)
		if hasPassword {
			b.WriteString(":" + redactMask)
		}
		b.WriteByte('@')
		userinfo = true
	}
	base, query, hasQuery := strings.Cut(rest, "?")
	if hasQuery {
		pairs := strings.Split(query, "&")
		for i, pair := range pairs {
			key, _, hasValue := strings.Cut(pair, "=")
			if hasValue && secretKeyword(key) {
				pairs[i] = key + "=" + redactMask
			}
		}
		rest = base + "?" + strings.Join(pairs, "&")
	}
	// A password holding an unencoded "/" hides the user information from
	// the rule above: an "@" then remains after the "/".
	if !userinfo && strings.Contains(rest, "@") {
		rest = strandedPassword.ReplaceAllLiteralString(rest, ":"+redactMask+"@")
	}
	b.WriteString(rest)
	return b.String()
}

// strandedPassword is what may be a password in a malformed URL.
var strandedPassword = regexp.MustCompile(`:[^@]+@`)

// secretKeyword reports whether a URL query key names a password, as
// libpq reads it (percent-decoded).
func secretKeyword(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	key = strings.ToLower(strings.TrimSpace(key))
	return key == "password" || key == "sslpassword"
}
