package main

import (
	"testing"

	"github.com/spf13/pflag"
)

// Every serve flag reads SOMBUS_<FLAG> when not given; the flag wins.
func TestServeFlagsFromEnvironment(t *testing.T) {
	t.Setenv("SOMBUS_LISTEN", "127.0.0.1:9999")
	t.Setenv("SOMBUS_PUBLIC_URL", "https://bus.example")
	t.Setenv("SOMBUS_ENVIRONMENT", "from-env")
	t.Setenv("SOMBUS_TRUSTED_PROXIES", "10.0.0.0/8,fd00::/8")
	cmd := newServeCommand()
	fs := cmd.Flags()
	if err := fs.Parse([]string{"--environment", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"listen": "127.0.0.1:9999", "public-url": "https://bus.example", "environment": "from-flag", "store": "sqlite:./sombus.db",
		"trusted-proxies": "10.0.0.0/8,fd00::/8", "max-conns-per-address": "256", "body-timeout": "30s"}
	for name, v := range want {
		if got := fs.Lookup(name).Value.String(); got != v {
			t.Errorf("--%s = %q, want %q", name, got, v)
		}
	}
	// Every flag of API.md §9 exists.
	for _, name := range []string{"listen", "store", "environment", "public-url", "tls-cert", "tls-key", "bootstrap-key"} {
		if fs.Lookup(name) == nil {
			t.Errorf("serve has no --%s", name)
		}
	}
}

func TestServeBadEnvironmentValue(t *testing.T) {
	t.Setenv("SOMBUS_RETENTION", "soon")
	fs := newServeCommand().Flags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs); err == nil {
		t.Fatal("a bad SOMBUS_RETENTION was accepted")
	}
	var _ *pflag.FlagSet = fs
}
