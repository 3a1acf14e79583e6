package store

import (
	"strings"
	"testing"
)

// TestRedact: a store value in a log line never shows a password, wherever
// libpq lets the value carry one, and shows the rest as it is.
func TestRedact(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"sqlite:./sombus.db", "sqlite:./sombus.db"},
		{"sqlite:/var/lib/sombus/db?synchronous=normal", "sqlite:/var/lib/sombus/db?synchronous=normal"},
		{"postgres://postgres@127.0.0.1:5432/probe?sslmode=disable", "postgres://postgres@127.0.0.1:5432/probe?sslmode=disable"},
		{"postgres://u:S3cretUser@h/db", "postgres://u:***@h/db"},
		{"postgresql://u:S3cretUser@h:5432/db?sslmode=require", "postgresql://u:***@h:5432/db?sslmode=require"},
		{"postgres://postgres@127.0.0.1:5432/probe?sslmode=disable&password=S3cretQuery",
			"postgres://postgres@127.0.0.1:5432/probe?sslmode=disable&password=***"},
		{"postgres://h/db?password=S3cretQuery&sslmode=disable", "postgres://h/db?password=***&sslmode=disable"},
		{"postgres://h/db?sslpassword=S3cretKey", "postgres://h/db?sslpassword=***"},
		{"postgres://h/db?pass%77ord=S3cretEnc", "postgres://h/db?pass%77ord=***"},
		{"postgres://u:S3cretUser@h/db?password=S3cretQuery", "postgres://u:***@h/db?password=***"},
		{"postgres://h?password=S3cretQuery", "postgres://h?password=***"},
		{"postgres://h/db?application_name=a@b&password=S3cretQuery", "postgres://h/db?application_name=a@b&password=***"},
		// Malformed: an unencoded "/" or "@" in the password.
		{"postgres://u:S3cret/User@h/db", ""},
		{"postgres://u:S3c@retUser@h/db", ""},
		{"postgres://u:S3c?retUser@h/db", ""},
		// Not a store value (ParseSpec refuses it): nothing shown.
		{"host=h user=u password=S3cretKV dbname=db", "***"},
	} {
		got := Redact(c.spec)
		for _, secret := range []string{"S3cret", "retUser", "User", "KV", "Key", "Query"} {
			if strings.Contains(c.spec, secret) && strings.Contains(got, secret) {
				t.Errorf("Redact(%q) = %q: shows %q", c.spec, got, secret)
			}
		}
		if c.want != "" && got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.spec, got, c.want)
		}
	}
}
