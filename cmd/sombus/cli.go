package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sombus/sombus/client"
)

// cliCommands are the commands that manage a running bus and move
// messages: thin layers over the client package.
func cliCommands() []*cobra.Command {
	return []*cobra.Command{
		newWorkspaceCommand(), newUserCommand(), newKeyCommand(), newMemberCommand(),
		newConnectionCommand(), newSecretCommand(), newDeadLettersCommand(), newPurgeCommand(),
		newAuditCommand(), newPublishCommand(), newReceiveCommand(), newSkillsCommand(),
		newBenchCommand(),
	}
}

// defaultURL is where `sombus serve` listens by default.
const defaultURL = "http://127.0.0.1:8080"

// cliOptions are the connection and output settings of one command tree:
// flags, else the SOMBUS_* environment variables. --url, --api-key and
// --output are the root command's (see bindGlobal), so that every command
// and the root's help show them.
type cliOptions struct {
	workspace              string
	clientID, clientSecret string
	cmd                    *cobra.Command
}

// bindGlobal adds the flags of every command that talks to a running bus
// to the root command: --url, --api-key and --output.
func bindGlobal(root *cobra.Command) {
	f := root.PersistentFlags()
	f.String("url", "", "the bus's base URL (env SOMBUS_URL; default "+defaultURL+")")
	f.String("api-key", "", "your API key, for the management commands (env SOMBUS_API_KEY)")
	f.StringP("output", "o", "table", "output format: table or json")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

// global is the value of one of the root's flags (see bindGlobal).
func (o *cliOptions) global(name string) string {
	if f := o.cmd.Root().PersistentFlags().Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// bind adds --workspace, when workspace, to cmd and its subcommands, and
// gives them the root's --url, --api-key and --output.
func (o *cliOptions) bind(cmd *cobra.Command, workspace bool) {
	o.cmd = cmd
	if workspace {
		cmd.PersistentFlags().StringVarP(&o.workspace, "workspace", "w", "", "the workspace id (env SOMBUS_WORKSPACE)")
	}
}

// bindClient adds the connection credential flags (publish and receive).
func (o *cliOptions) bindClient(cmd *cobra.Command) {
	o.cmd = cmd
	f := cmd.Flags()
	f.StringVar(&o.clientID, "client-id", "", "the connection's client id (env SOMBUS_CLIENT_ID)")
	f.StringVar(&o.clientSecret, "client-secret", "", "the connection's client secret (env SOMBUS_CLIENT_SECRET)")
	f.StringVarP(&o.workspace, "workspace", "w", "", "the workspace id (env SOMBUS_WORKSPACE; default: read from the access token)")
}

// setting is the flag's value, else the environment variable's, else def.
func setting(flag, env, def string) string {
	if flag != "" {
		return flag
	}
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

func (o *cliOptions) baseURL() string { return setting(o.global("url"), "SOMBUS_URL", defaultURL) }

// manager is the management client of the command.
func (o *cliOptions) manager() (*client.Manager, error) {
	if err := o.checkOutput(); err != nil {
		return nil, err
	}
	key := setting(o.global("api-key"), "SOMBUS_API_KEY", "")
	if key == "" {
		return nil, errors.New("no API key: pass --api-key or set SOMBUS_API_KEY")
	}
	return &client.Manager{BaseURL: o.baseURL(), APIKey: key, UserAgent: "sombus-cli"}, nil
}

// ws is the workspace id of a workspace-scoped command.
func (o *cliOptions) ws() (string, error) {
	w := setting(o.workspace, "SOMBUS_WORKSPACE", "")
	if w == "" {
		return "", errors.New("no workspace: pass --workspace or set SOMBUS_WORKSPACE")
	}
	return w, nil
}

// workspaceManager is the management client and workspace id of a
// workspace-scoped command.
func (o *cliOptions) workspaceManager() (*client.Manager, string, error) {
	m, err := o.manager()
	if err != nil {
		return nil, "", err
	}
	ws, err := o.ws()
	return m, ws, err
}

// clientConfig is the SDK configuration of publish and receive.
func (o *cliOptions) clientConfig() (client.Config, error) {
	if err := o.checkOutput(); err != nil {
		return client.Config{}, err
	}
	cfg := client.Config{
		BaseURL:      o.baseURL(),
		ClientID:     setting(o.clientID, "SOMBUS_CLIENT_ID", ""),
		ClientSecret: setting(o.clientSecret, "SOMBUS_CLIENT_SECRET", ""),
		WorkspaceID:  setting(o.workspace, "SOMBUS_WORKSPACE", ""),
		UserAgent:    "sombus-cli",
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return cfg, errors.New("no credentials: pass --client-id and --client-secret or set SOMBUS_CLIENT_ID and SOMBUS_CLIENT_SECRET")
	}
	return cfg, nil
}

func (o *cliOptions) checkOutput() error {
	if out := o.global("output"); out != "table" && out != "json" {
		return fmt.Errorf("--output must be table or json (got %q)", out)
	}
	return nil
}

func (o *cliOptions) json() bool { return o.global("output") == "json" }

// print writes v as indented JSON (-o json) or calls table with a
// tabwriter for people.
func (o *cliOptions) print(cmd *cobra.Command, v any, table func(w io.Writer)) error {
	out := cmd.OutOrStdout()
	if o.json() {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// row writes one tab-separated table row.
func row(w io.Writer, cols ...any) {
	for i, c := range cols {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
}

// when formats a time for tables ("-" for none).
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func whenPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return when(*t)
}

// plural is n with the noun's singular or plural form: "1 envelope",
// "2 envelopes".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// shortDuration writes d without zero minutes and seconds: 12h, not
// 12h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// compact shortens JSON for a table cell.
func compact(raw []byte, max int) string {
	s := strings.Join(strings.Fields(string(raw)), " ")
	if len(s) > max {
		s = s[:max-1] + "…"
	}
	return s
}

// isTerminal reports whether w is a terminal (progress bars only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newBar returns a progress bar on standard error when it is a terminal
// (or force); otherwise the bar draws into io.Discard.
func newBar(cmd *cobra.Command, total int, what string, force bool) *progressbar.ProgressBar {
	w := cmd.ErrOrStderr()
	if !force && !isTerminal(w) {
		w = io.Discard
	}
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString("msg"),
		progressbar.OptionShowIts(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// completeConnections completes connection ids of the workspace, when the
// flags or environment say where the bus is.
func (o *cliOptions) completeConnections(kind string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		m, err := o.manager()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ws, err := o.ws()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list, err := m.ListConnections(cmd.Context(), ws, kind)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, c := range list {
			out = append(out, cobra.CompletionWithDesc(c.ID, c.Kind+" "+c.Name))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
