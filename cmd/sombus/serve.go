package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sombus/sombus/internal/server"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "sombus",
		Short:         "sombus: a self-hostable, multi-tenant message bus",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	bindGlobal(root)
	setVersion(root)
	root.AddCommand(newServeCommand())
	root.AddCommand(cliCommands()...)
	return root
}

// envName is the environment variable of a flag: --public-url is
// SOMBUS_PUBLIC_URL.
func envName(flag string) string {
	return "SOMBUS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its
// environment variable (the flag wins).
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s: %w", envName(f.Name), serr)
			}
		}
	})
	return err
}

func newServeCommand() *cobra.Command {
	var cfg server.Config
	var logLevel, logFormat string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a sombus node",
		Long: `Run a sombus node. Every flag has an environment variable of the same name
(--listen and SOMBUS_LISTEN); the flag wins.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			opts := &slog.HandlerOptions{Level: level}
			var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
			if logFormat == "text" {
				h = slog.NewTextHandler(os.Stderr, opts)
			}
			cfg.Logger = slog.New(newThrottle(h, logRepeatEvery))
			cfg.Stdout = cmd.OutOrStdout()
			if percent, limit := gcDefaults(); percent != 0 || limit != 0 {
				cfg.Logger.Debug("garbage collector", "gc_percent", percent, "memory_limit_bytes", limit)
			}
			srv, err := server.New(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			idleCtx, stopIdle := context.WithCancel(context.Background())
			defer stopIdle()
			go collectWhenIdle(idleCtx, cfg.Logger)
			werr := srv.Wait(cmd.Context())
			cfg.Logger.Info("shutting down")
			if err := srv.Close(); err != nil && werr == nil {
				werr = err
			}
			return werr
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address to serve on")
	f.StringVar(&cfg.Store, "store", "sqlite:./sombus.db", "sqlite:PATH (embedded, one node) or a postgres:// URL (several nodes may share it)")
	f.StringVar(&cfg.Environment, "environment", "sandbox", "the environment name that tokens are issued for and checked against")
	f.StringVar(&cfg.PublicURL, "public-url", "", "the base URL written into tokens (iss) and into the URLs shown with a new secret (default http:// + listen address, https:// with --tls-cert)")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "serve HTTPS (HTTP/2) with this PEM certificate")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "the PEM private key of --tls-cert")
	f.StringVar(&cfg.BootstrapKey, "bootstrap-key", "", "the first operator's API key (at least 32 characters), used only when the store has no users yet (default: generate one and print it once)")
	f.StringVar(&cfg.TiersFile, "tiers", "", "a JSON file of quota tiers merged over the built-in standard and unlimited tiers")
	f.DurationVar(&cfg.Retention, "retention", 4*24*time.Hour, "how long a message not acknowledged is kept (1m to 336h)")
	f.StringVar(&cfg.TrustedProxies, "trusted-proxies", "", "comma-separated CIDRs of the load balancers in front of the node; from them the client's address is the rightmost X-Forwarded-For entry outside these ranges (default none: X-Forwarded-For is ignored)")
	f.IntVar(&cfg.MaxConnsPerAddr, "max-conns-per-address", server.DefaultMaxConnsPerAddr, "the most connections one client address (IPv4 address, IPv6 /64) may hold open; past it new ones are closed at once (0: no cap; trusted proxies are not capped)")
	f.DurationVar(&cfg.StoreTimeout, "store-timeout", server.DefaultStoreTimeout, "how long a token, publish or pull request may take, beyond a long poll's wait and its body's arrival, before it is answered 503 (1s to 1m): a database that accepts connections and never answers then holds a request this long, not minutes; management and portal requests are not bounded")
	f.DurationVar(&cfg.BodyTimeout, "body-timeout", server.DefaultBodyTimeout, "the longest a request body may take to arrive; a slower request is refused and its connection closed (long polls have no body and are not cut)")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve GET /metrics only on this address (plain HTTP), and answer it 404 on --listen (default: /metrics is served on --listen)")
	f.StringVar(&cfg.PprofListen, "pprof-listen", "", "serve the Go runtime's profiles (/debug/pprof/) on this loopback address, for diagnosing memory and CPU (default: not served)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "json", "json or text")
	return cmd
}
