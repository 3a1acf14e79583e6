package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
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
	// Every documented serve flag exists.
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

// A store that cannot be opened ends serve with its real error and a
// non-zero exit, never a panic. The test runs main in a child process (the
// test binary itself), so the exit code and standard error are the real ones.
func TestServeUnopenableStoreExits(t *testing.T) {
	if args := os.Getenv("SOMBUS_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"sombus"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	t.Parallel()
	for _, tc := range []struct{ store, want string }{
		{"sqlite:/proc/nope/sombus.db", "/proc/nope/sombus.db"},
		{"postgres://nobody@127.0.0.1:5999/x", "127.0.0.1"},
	} {
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestServeUnopenableStoreExits$")
			cmd.Env = append(os.Environ(), "SOMBUS_TEST_MAIN_ARGS="+strings.Join([]string{"serve", "--store", tc.store, "--listen", "127.0.0.1:0"}, "\n"))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("serve --store %s: want a non-zero exit, got %v\nstderr: %s", tc.store, err, stderr.String())
			}
			out := stderr.String()
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("serve --store %s panicked:\n%s", tc.store, out)
			}
			if !strings.Contains(out, "open store") || !strings.Contains(out, tc.want) {
				t.Fatalf("serve --store %s: stderr does not name the store's error (want %q):\n%s", tc.store, tc.want, out)
			}
		})
	}
}

// --metrics-listen reads SOMBUS_METRICS_LISTEN and is unset by default.
func TestServeMetricsListenFlag(t *testing.T) {
	fs := newServeCommand().Flags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	f := fs.Lookup("metrics-listen")
	if f == nil || f.DefValue != "" {
		t.Fatalf("--metrics-listen: %+v, want a flag with no default", f)
	}
	t.Setenv("SOMBUS_METRICS_LISTEN", "127.0.0.1:9090")
	if err := applyEnv(fs); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != "127.0.0.1:9090" {
		t.Errorf("--metrics-listen from SOMBUS_METRICS_LISTEN = %q", got)
	}
}
