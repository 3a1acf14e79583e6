package store

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// FuzzParseSpec: a --store value is accepted only as a SQLite file path
// (with known parameters) or a PostgreSQL URL pgx reads; the parsed spec
// names the same thing again; a refusal never repeats the URL's password.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"sqlite:./sombus.db", "sqlite:/var/lib/sombus/db?synchronous=normal", "sqlite:", "sqlite:?synchronous=full",
		"sqlite:x?synchronous=fast", "sqlite:x?foo=1", "sqlite:x?synchronous=full&synchronous=normal", "sqlite::memory:",
		"sqlite:file:x.db", "sqlite:x#y", "sqlite:x?%zz", "sqlite:a b/c.db",
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgresql://u:s3cr3t-pw@h/db?pool_max_conns=20",
		"postgres://u:s3cr3t-pw@h:99999/db", "postgres://u:s3cr3t-pw@h/db?sslmode=bogus", "postgres://u:s3cr3t-pw@[::1/db",
		"postgres://u:s3cr3t%zz@h/db", "postgres://u:my secret@h/db", "postgres://u:pw@h/db?x=1 2", "postgres://u:pw@h/db?pool_max_conns=x", "postgres://h/db?sslmode=disable&password=s3cr3t-query",
		"postgres://h/db?pass%77ord=s3cr3t-query", "postgres://", "mysql://x", "", "SQLITE:x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseSpec(spec)
		if err != nil {
			if s != (Spec{}) {
				t.Fatalf("refused %q but returned %+v", spec, s)
			}
			msg := err.Error()
			if msg == "" {
				t.Fatalf("empty refusal of %q", spec)
			}
			if u, perr := url.Parse(spec); perr == nil && u.User != nil {
				// As below: a password whose text stands elsewhere in the
				// spec too (in the user name, say) cannot be told apart.
				if pw, ok := u.User.Password(); ok && len(pw) >= 4 && strings.Count(spec, pw) <= 1 && repeats(msg, spec, pw) {
					t.Fatalf("refusal %q repeats the password of %q", msg, spec)
				}
			}
			if i := strings.Index(spec, "://"); i >= 0 {
				// A password url.Parse could not read is still a password:
				// what stands between ":" and the last "@" of the authority
				// (which ends at the first "/", "?" or "#"). Only a text
				// that appears nowhere else in the spec can be told apart.
				authority := spec[i+3:]
				if j := strings.IndexAny(authority, "/?#"); j >= 0 {
					authority = authority[:j]
				}
				if at := strings.LastIndexByte(authority, '@'); at >= 0 {
					if _, pw, ok := strings.Cut(authority[:at], ":"); ok && len(pw) >= 4 && strings.Count(spec, pw) <= 1 && repeats(msg, spec, pw) {
						t.Fatalf("refusal %q repeats the password text of %q", msg, spec)
					}
				}
			}
			return
		}
		switch s.Kind {
		case KindSQLite:
			if "sqlite:"+s.Target != spec || s.Path == "" || !strings.HasPrefix(s.Target, s.Path) ||
				strings.ContainsAny(s.Path, "?#") || s.Path == ":memory:" || strings.HasPrefix(s.Path, "file:") {
				t.Fatalf("%q parsed as %+v", spec, s)
			}
			if rest := strings.TrimPrefix(s.Target, s.Path); rest != "" && rest[0] != '?' {
				t.Fatalf("%q: path %q is followed by %q", spec, s.Path, rest)
			}
		case KindPostgres:
			if s.Target != spec || s.Path != "" {
				t.Fatalf("%q parsed as %+v", spec, s)
			}
			// The password pgx reads, wherever the URL holds it, is not in
			// the value the log shows.
			if cfg, err := pgconn.ParseConfig(spec); err == nil {
				if pw := cfg.Password; len(pw) >= 4 && strings.Count(spec, pw) == 1 && strings.Contains(Redact(spec), pw) {
					t.Fatalf("Redact(%q) = %q shows the password %q", spec, Redact(spec), pw)
				}
			}
		default:
			t.Fatalf("%q parsed as kind %q", spec, s.Kind)
		}
		again, err := ParseSpec(spec)
		if err != nil || again != s {
			t.Fatalf("%q parsed twice: %+v, then %+v, %v", spec, s, again, err)
		}
	})
}

// repeats reports whether the refusal msg of spec holds the password pw
// taken from spec, not merely the same text as its own wording (a
// password "res:" is in "postgres://"): the refusal of spec with pw
// replaced by other characters must not hold pw too.
func repeats(msg, spec, pw string) bool {
	if !strings.Contains(msg, pw) {
		return false
	}
	_, err := ParseSpec(strings.ReplaceAll(spec, pw, strings.Repeat("\x01", len(pw))))
	return err == nil || !strings.Contains(err.Error(), pw)
}
