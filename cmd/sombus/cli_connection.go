package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/jsonenc"
)

// connectionFlags are the settable fields of create and update.
type connectionFlags struct {
	kind, name, tier string
	attemptLimit     int
	subscribe        []string
}

func (f *connectionFlags) add(cmd *cobra.Command, create bool) {
	fs := cmd.Flags()
	if create {
		fs.StringVar(&f.kind, "kind", "", "consumer or producer")
		_ = cmd.MarkFlagRequired("kind")
		_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]string{"consumer", "producer"}, cobra.ShellCompDirectiveNoFileComp))
	}
	fs.StringVar(&f.name, "name", "", "the connection's name")
	fs.IntVar(&f.attemptLimit, "attempt-limit", 0, "deliveries before a message moves to the dead-letter queue, 1 to 1000 (default 5)")
	fs.StringVar(&f.tier, "quota-tier", "", "the quota tier (default standard)")
	fs.StringArrayVar(&f.subscribe, "subscribe", nil, "a subscription TOPIC or TOPIC=PRODUCER,PRODUCER (consumers; repeat for several; replaces them all on update)")
}

// params builds the request from the flags that were given.
func (f *connectionFlags) params(cmd *cobra.Command) (client.ConnectionParams, error) {
	p := client.ConnectionParams{Kind: f.kind}
	fs := cmd.Flags()
	if fs.Changed("name") {
		p.Name = &f.name
	}
	if fs.Changed("attempt-limit") {
		p.AttemptLimit = &f.attemptLimit
	}
	if fs.Changed("quota-tier") {
		p.QuotaTier = &f.tier
	}
	if fs.Changed("subscribe") {
		subs := []client.Subscription{}
		for _, s := range f.subscribe {
			topic, producers, found := strings.Cut(s, "=")
			sub := client.Subscription{Topic: topic}
			if found {
				for _, pr := range strings.Split(producers, ",") {
					if pr = strings.TrimSpace(pr); pr != "" {
						sub.Producers = append(sub.Producers, pr)
					}
				}
			}
			subs = append(subs, sub)
		}
		p.Subscriptions = &subs
	}
	return p, nil
}

func subscriptionsText(subs []client.Subscription) string {
	if len(subs) == 0 {
		return "-"
	}
	var parts []string
	for _, s := range subs {
		t := s.Topic
		if len(s.Producers) > 0 {
			t += "=" + strings.Join(s.Producers, ",")
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, " ")
}

func connectionsTable(cs ...client.Connection) func(io.Writer) {
	return func(w io.Writer) {
		row(w, "ID", "KIND", "NAME", "STATUS", "SECRET", "READY", "IN FLIGHT", "DEAD", "SUBSCRIPTIONS")
		for _, c := range cs {
			ready, inflight, dead := "-", "-", "-"
			if c.QueueStats != nil {
				ready, inflight, dead = fmt.Sprint(c.Ready), fmt.Sprint(c.InFlight), fmt.Sprint(c.DeadLetters)
			}
			row(w, c.ID, c.Kind, c.Name, c.Status, c.Secret.State, ready, inflight, dead, subscriptionsText(c.Subscriptions))
		}
	}
}

// connectionDetail is the table of one connection: a field per line.
func connectionDetail(c *client.Connection) func(io.Writer) {
	return func(w io.Writer) {
		row(w, "id", c.ID)
		row(w, "workspace", c.WorkspaceID)
		row(w, "kind", c.Kind)
		row(w, "name", c.Name)
		row(w, "status", c.Status)
		row(w, "attempt limit", c.AttemptLimit)
		row(w, "quota tier", c.QuotaTier)
		row(w, "credential version", c.CredentialVersion)
		row(w, "secret", c.Secret.State)
		row(w, "secret issued", whenPtr(c.Secret.IssuedAt))
		row(w, "previous secret expires", whenPtr(c.Secret.PreviousExpiresAt))
		row(w, "subscriptions", subscriptionsText(c.Subscriptions))
		row(w, "created", when(c.CreatedAt))
		if q := c.QueueStats; q != nil {
			row(w, "ready", q.Ready)
			row(w, "in flight", q.InFlight)
			row(w, "delayed", q.Delayed)
			row(w, "dead letters", q.DeadLetters)
			row(w, "oldest ready age", fmt.Sprintf("%.1fs", q.OldestReadyAgeSeconds))
		}
	}
}

func secretTable(s *client.Secret) func(io.Writer) {
	return func(w io.Writer) {
		row(w, "client id", s.ClientID)
		row(w, "client secret", s.ClientSecret)
		row(w, "credential version", s.CredentialVersion)
		row(w, "token url", s.TokenURL)
		row(w, "messages url", s.MessagesURL)
		for _, kv := range [][2]string{{"ack url", s.AckURL}, {"nack url", s.NackURL}, {"skills url", s.SkillsURL}} {
			if kv[1] != "" {
				row(w, kv[0], kv[1])
			}
		}
	}
}

// connCmd is a subcommand taking one connection id.
func connCmd(o *cliOptions, use, short, kind string, run func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		ValidArgsFunction: o.completeConnections(kind),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, ws, err := o.workspaceManager()
			if err != nil {
				return err
			}
			return run(cmd.Context(), cmd, m, ws, args[0])
		},
	}
}

// rotateCmd is `secret rotate` and `connection rotate`.
func rotateCmd(o *cliOptions) *cobra.Command {
	var overlap string
	cmd := connCmd(o, "rotate CONNECTION", "Issue a new client secret; the previous one keeps working for --overlap", "",
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			s, err := m.RotateSecret(ctx, ws, id, overlap)
			if err != nil {
				return err
			}
			return printSecret(o, cmd, s)
		})
	cmd.Flags().StringVar(&overlap, "overlap", "24h", "how long the previous secret still gets tokens: 24h, 3d, 1h or none")
	_ = cmd.RegisterFlagCompletionFunc("overlap", cobra.FixedCompletions([]string{"24h", "3d", "1h", "none"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func printSecret(o *cliOptions, cmd *cobra.Command, s *client.Secret) error {
	if !o.json() {
		fmt.Fprintln(cmd.ErrOrStderr(), "The client secret is shown only now: keep it somewhere safe.")
	}
	return o.print(cmd, s, secretTable(s))
}

func newConnectionCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "connection", Aliases: []string{"connections", "conn"}, Short: "Manage a workspace's producer and consumer connections"}
	o.bind(cmd, true)

	var cf connectionFlags
	create := &cobra.Command{
		Use: "create --kind consumer|producer --name NAME", Short: "Create a connection (admins)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, ws, err := o.workspaceManager()
			if err != nil {
				return err
			}
			p, err := cf.params(cmd)
			if err != nil {
				return err
			}
			c, err := m.CreateConnection(cmd.Context(), ws, p)
			if err != nil {
				return err
			}
			return o.print(cmd, c, connectionDetail(c))
		},
	}
	cf.add(create, true)

	var uf connectionFlags
	update := connCmd(o, "update CONNECTION", "Change a connection's name, attempt limit, quota tier or subscriptions (admins)", "",
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			p, err := uf.params(cmd)
			if err != nil {
				return err
			}
			c, err := m.UpdateConnection(ctx, ws, id, p)
			if err != nil {
				return err
			}
			return o.print(cmd, c, connectionDetail(c))
		})
	uf.add(update, false)

	var kind string
	list := &cobra.Command{
		Use: "list", Short: "List connections", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, ws, err := o.workspaceManager()
			if err != nil {
				return err
			}
			cs, err := m.ListConnections(cmd.Context(), ws, kind)
			if err != nil {
				return err
			}
			return o.print(cmd, cs, connectionsTable(cs...))
		},
	}
	list.Flags().StringVar(&kind, "kind", "", "only consumer or producer connections")

	show := connCmd(o, "show CONNECTION", "Show a connection and, for a consumer, its queue", "",
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			c, err := m.GetConnection(ctx, ws, id)
			if err != nil {
				return err
			}
			return o.print(cmd, c, connectionDetail(c))
		})
	status := func(use, short string, f func(*client.Manager, context.Context, string, string) (*client.Connection, error)) *cobra.Command {
		return connCmd(o, use, short, "", func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			c, err := f(m, ctx, ws, id)
			if err != nil {
				return err
			}
			return o.print(cmd, c, connectionsTable(*c))
		})
	}
	var yes bool
	remove := connCmd(o, "remove CONNECTION --yes", "Delete a connection with its queue and credentials (admins)", "",
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			if !yes {
				return errors.New("remove deletes the connection, its queue and its credentials for good: pass --yes")
			}
			if err := m.RemoveConnection(ctx, ws, id); err != nil {
				return err
			}
			return o.print(cmd, map[string]any{"id": id, "removed": true}, func(w io.Writer) { fmt.Fprintf(w, "Removed %s.\n", id) })
		})
	remove.Flags().BoolVar(&yes, "yes", false, "confirm the removal")
	usage := connCmd(o, "usage CONNECTION", "Show a connection's requests today against its daily quota", "",
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			u, err := m.Usage(ctx, ws, id)
			if err != nil {
				return err
			}
			return o.print(cmd, u, func(w io.Writer) {
				quota, left := "unlimited", "-"
				if u.DailyQuota != nil {
					quota = fmt.Sprint(*u.DailyQuota)
				}
				if u.Remaining != nil {
					left = fmt.Sprint(*u.Remaining)
				}
				row(w, "CONNECTION", "TIER", "DAY", "REQUESTS", "QUOTA", "REMAINING", "RESETS")
				row(w, u.ConnectionID, u.Tier, u.Day, u.RequestsToday, quota, left, when(u.ResetsAt))
			})
		})
	cmd.AddCommand(create, list, show, update, rotateCmd(o),
		status("revoke CONNECTION", "Revoke a connection: no new tokens, requests refused within 30 s; the queue is kept (admins)", (*client.Manager).RevokeConnection),
		status("restore CONNECTION", "Restore a revoked connection: the same secret works again (admins)", (*client.Manager).RestoreConnection),
		remove, usage)
	return cmd
}

func newSecretCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "secret", Short: "Issue, rotate and revoke a connection's client secret (developers)"}
	o.bind(cmd, true)
	status := func(use, short string, f func(*client.Manager, context.Context, string, string) (*client.Connection, error)) *cobra.Command {
		return connCmd(o, use, short, "", func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			c, err := f(m, ctx, ws, id)
			if err != nil {
				return err
			}
			return o.print(cmd, c, connectionDetail(c))
		})
	}
	cmd.AddCommand(
		connCmd(o, "get CONNECTION", `"Get client secret": a new secret when none is active (shown once)`, "",
			func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
				s, err := m.IssueSecret(ctx, ws, id)
				if err != nil {
					return err
				}
				return printSecret(o, cmd, s)
			}),
		rotateCmd(o),
		status("stop-previous CONNECTION", "End a rotation's overlap now: the previous secret stops getting tokens", (*client.Manager).StopPreviousSecret),
		status("revoke CONNECTION", "Stop the secret at once and its tokens within 30 s; the connection and queue stay", (*client.Manager).RevokeSecret),
	)
	return cmd
}

func deadLettersTable(ds []client.DeadLetter) func(io.Writer) {
	return func(w io.Writer) {
		row(w, "MESSAGE ID", "TYPE", "STORY", "DELIVERIES", "ENQUEUED", "DEAD-LETTERED", "PAYLOAD")
		for _, d := range ds {
			var env struct {
				Payload json.RawMessage `json:"payload"`
			}
			_ = json.Unmarshal(d.Envelope, &env)
			row(w, d.MessageID, d.MessageType, d.CorrelationID, d.ReceiveCount, when(d.EnqueuedAt), when(d.DeadLetteredAt), compact(env.Payload, 60))
		}
	}
}

func newDeadLettersCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "dead-letters", Aliases: []string{"dlq"}, Short: "List and redrive a consumer's dead letters"}
	o.bind(cmd, true)
	var page client.PageOptions
	var all bool
	list := connCmd(o, "list CONSUMER", "List dead letters, oldest first", client.KindConsumer,
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			if !all {
				p, err := m.ListDeadLetters(ctx, ws, id, page)
				if err != nil {
					return err
				}
				if err := o.print(cmd, p, deadLettersTable(p.DeadLetters)); err != nil {
					return err
				}
				if p.NextCursor != "" && !o.json() {
					fmt.Fprintf(cmd.ErrOrStderr(), "More: --cursor %s\n", p.NextCursor)
				}
				return nil
			}
			ds := []client.DeadLetter{}
			for d, err := range m.AllDeadLetters(ctx, ws, id) {
				if err != nil {
					return err
				}
				ds = append(ds, d)
			}
			return o.print(cmd, client.DeadLetterPage{DeadLetters: ds}, deadLettersTable(ds))
		})
	list.Flags().IntVar(&page.Limit, "limit", 0, "dead letters per page, 1 to 100 (default 50)")
	list.Flags().StringVar(&page.Cursor, "cursor", "", "the cursor a previous page printed")
	list.Flags().BoolVar(&all, "all", false, "read every page")

	var progress bool
	redrive := &cobra.Command{
		Use:   "redrive CONSUMER [MESSAGE_ID...]",
		Short: "Move dead letters (all, or the given ones) back to the end of their stories",
		Args:  cobra.MinimumNArgs(1), ValidArgsFunction: o.completeConnections(client.KindConsumer),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, ws, err := o.workspaceManager()
			if err != nil {
				return err
			}
			id, ids := args[0], args[1:]
			total := 0
			if len(ids) == 0 {
				// One request moves them all at once.
				if total, err = m.RedriveDeadLetters(cmd.Context(), ws, id, nil); err != nil {
					return err
				}
			} else {
				// Many ids go in chunks, with progress.
				const chunk = 100
				bar := newBar(cmd, len(ids), "redrive", progress)
				for len(ids) > 0 {
					n := min(len(ids), chunk)
					moved, err := m.RedriveDeadLetters(cmd.Context(), ws, id, ids[:n])
					if err != nil {
						_ = bar.Exit()
						return fmt.Errorf("after %d redriven: %w", total, err)
					}
					total += moved
					_ = bar.Add(n)
					ids = ids[n:]
				}
				_ = bar.Finish()
			}
			return o.print(cmd, map[string]int{"redriven": total}, func(w io.Writer) { fmt.Fprintf(w, "Redrove %s.\n", plural(total, "dead letter", "dead letters")) })
		},
	}
	redrive.Flags().BoolVar(&progress, "progress", false, "show a progress bar even when standard error is not a terminal")
	cmd.AddCommand(list, redrive)
	return cmd
}

func newPurgeCommand() *cobra.Command {
	o := &cliOptions{}
	var yes bool
	cmd := connCmd(o, "purge CONSUMER --yes", "Drop every message in a consumer's queue, not its dead letters (admins)", client.KindConsumer,
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			if !yes {
				return errors.New("purge drops every message in the queue for good: pass --yes")
			}
			n, err := m.Purge(ctx, ws, id)
			if err != nil {
				return err
			}
			return o.print(cmd, map[string]int{"purged": n}, func(w io.Writer) { fmt.Fprintf(w, "Purged %s.\n", plural(n, "message", "messages")) })
		})
	o.bind(cmd, true)
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the purge")
	return cmd
}

func newAuditCommand() *cobra.Command {
	o := &cliOptions{}
	var page client.PageOptions
	var all, global bool
	cmd := &cobra.Command{
		Use: "audit", Short: "Read the workspace's audit log, or with --global that of users and keys, newest first", Args: cobra.NoArgs,
		Long: `Read the workspace's audit log (admins), newest first. With --global, read the
entries that belong to no workspace instead: users and API keys created (operators).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := o.auditLister(global)
			if err != nil {
				return err
			}
			var entries []client.AuditEntry
			next := ""
			for {
				p, err := list(cmd.Context(), page)
				if err != nil {
					return err
				}
				entries = append(entries, p.Entries...)
				next = p.NextCursor
				if !all || next == "" {
					break
				}
				page.Cursor = next
			}
			if entries == nil {
				entries = []client.AuditEntry{}
			}
			if err := o.print(cmd, client.AuditPage{Entries: entries, NextCursor: next}, func(w io.Writer) {
				row(w, "AT", "ACTOR", "ACTION", "TARGET", "DETAILS")
				for _, e := range entries {
					d, _ := jsonenc.Marshal(e.Details)
					row(w, when(e.At), e.Actor, e.Action, e.Target, compact(d, 80))
				}
			}); err != nil {
				return err
			}
			if next != "" && !all && !o.json() {
				fmt.Fprintf(cmd.ErrOrStderr(), "More: --cursor %s\n", next)
			}
			return nil
		},
	}
	o.bind(cmd, true)
	cmd.Flags().IntVar(&page.Limit, "limit", 0, "entries per page, 1 to 100 (default 50)")
	cmd.Flags().StringVar(&page.Cursor, "cursor", "", "the cursor a previous page printed")
	cmd.Flags().BoolVar(&all, "all", false, "read every page")
	cmd.Flags().BoolVar(&global, "global", false, "read the entries of no workspace: users and API keys created (operators)")
	return cmd
}

// auditLister reads pages of the workspace's audit log, or with global of
// the entries of no workspace.
func (o *cliOptions) auditLister(global bool) (func(context.Context, client.PageOptions) (*client.AuditPage, error), error) {
	if !global {
		m, ws, err := o.workspaceManager()
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, p client.PageOptions) (*client.AuditPage, error) {
			return m.ListAudit(ctx, ws, p)
		}, nil
	}
	if o.workspace != "" {
		return nil, errors.New("--global reads the entries of no workspace: leave out --workspace")
	}
	m, err := o.manager()
	if err != nil {
		return nil, err
	}
	return m.ListGlobalAudit, nil
}
