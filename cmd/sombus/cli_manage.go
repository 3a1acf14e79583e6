package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sombus/sombus/client"
)

func workspaceTable(ws ...client.Workspace) func(io.Writer) {
	return func(w io.Writer) {
		row(w, "ID", "NAME", "CREATED")
		for _, x := range ws {
			row(w, x.ID, x.Name, when(x.CreatedAt))
		}
	}
}

func newWorkspaceCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "workspace", Aliases: []string{"workspaces", "ws"}, Short: "Create and read workspaces"}
	o.bind(cmd, false)
	cmd.AddCommand(&cobra.Command{
		Use: "create NAME", Short: "Create a workspace (operators; you become its owner)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := o.manager()
			if err != nil {
				return err
			}
			ws, err := m.CreateWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.print(cmd, ws, workspaceTable(*ws))
		},
	}, &cobra.Command{
		Use: "list", Short: "List the workspaces you are a member of", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := o.manager()
			if err != nil {
				return err
			}
			list, err := m.ListWorkspaces(cmd.Context())
			if err != nil {
				return err
			}
			return o.print(cmd, list, workspaceTable(list...))
		},
	}, &cobra.Command{
		Use: "show WORKSPACE", Short: "Show a workspace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := o.manager()
			if err != nil {
				return err
			}
			ws, err := m.GetWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.print(cmd, ws, workspaceTable(*ws))
		},
	})
	return cmd
}

func newUserCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "user", Aliases: []string{"users"}, Short: "Create users and see who you are"}
	o.bind(cmd, false)
	var name, email string
	var operator bool
	create := &cobra.Command{
		Use: "create --name NAME --email EMAIL [--operator]", Short: "Create a user (operators)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := o.manager()
			if err != nil {
				return err
			}
			u, err := m.CreateUser(cmd.Context(), name, email, operator)
			if err != nil {
				return err
			}
			return o.print(cmd, u, func(w io.Writer) {
				row(w, "ID", "NAME", "EMAIL", "OPERATOR", "CREATED")
				row(w, u.ID, u.Name, u.Email, u.Operator, when(u.CreatedAt))
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "the user's name")
	create.Flags().StringVar(&email, "email", "", "the user's e-mail address")
	create.Flags().BoolVar(&operator, "operator", false, "make the user an operator (may create workspaces and users)")
	_ = create.MarkFlagRequired("name")
	_ = create.MarkFlagRequired("email")
	cmd.AddCommand(create, newSetPasswordCommand(o), &cobra.Command{
		Use: "whoami", Short: "Show the user of your API key and its roles", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := o.manager()
			if err != nil {
				return err
			}
			me, err := m.Whoami(cmd.Context())
			if err != nil {
				return err
			}
			return o.print(cmd, me, func(w io.Writer) {
				row(w, "USER", "NAME", "EMAIL", "OPERATOR")
				row(w, me.User.ID, me.User.Name, me.User.Email, me.User.Operator)
				if len(me.Roles) > 0 {
					row(w)
					row(w, "WORKSPACE", "ROLE")
					for _, r := range me.Roles {
						row(w, r.WorkspaceID, r.Role)
					}
				}
			})
		},
	})
	return cmd
}

func newKeyCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "key", Aliases: []string{"keys"}, Short: "Issue API keys"}
	o.bind(cmd, false)
	cmd.AddCommand(&cobra.Command{
		Use: "create USER", Short: "Issue an API key for a user (operators); it is shown once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := o.manager()
			if err != nil {
				return err
			}
			k, err := m.CreateAPIKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !o.json() {
				fmt.Fprintln(cmd.ErrOrStderr(), "The API key is shown only now: keep it somewhere safe.")
			}
			return o.print(cmd, k, func(w io.Writer) {
				row(w, "ID", "USER", "API KEY")
				row(w, k.ID, k.UserID, k.Key)
			})
		},
	})
	return cmd
}

func newMemberCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "member", Aliases: []string{"members"}, Short: "Grant, change and remove users' roles in a workspace (owners)"}
	o.bind(cmd, true)
	cmd.AddCommand(&cobra.Command{
		Use: "set USER ROLE", Short: "Grant or change a role: viewer, developer, admin or owner", Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return []cobra.Completion{"viewer", "developer", "admin", "owner"}, cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			m, ws, err := o.workspaceManager()
			if err != nil {
				return err
			}
			mem, err := m.SetMember(cmd.Context(), ws, args[0], client.Role(args[1]))
			if err != nil {
				return err
			}
			return o.print(cmd, mem, func(w io.Writer) {
				row(w, "WORKSPACE", "USER", "ROLE")
				row(w, mem.WorkspaceID, mem.UserID, mem.Role)
			})
		},
	}, &cobra.Command{
		Use: "remove USER", Short: "Remove a user's role in the workspace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, ws, err := o.workspaceManager()
			if err != nil {
				return err
			}
			if err := m.RemoveMember(cmd.Context(), ws, args[0]); err != nil {
				return err
			}
			return o.print(cmd, map[string]any{"workspace_id": ws, "user_id": args[0], "removed": true}, func(w io.Writer) {
				fmt.Fprintf(w, "Removed %s from %s.\n", args[0], ws)
			})
		},
	})
	return cmd
}

// maxPasswordInput bounds what set-password reads from a pipe: the longest
// password the server takes (1024 bytes), a line ending, and one byte more
// to tell a longer one.
const maxPasswordInput = 1024 + 3

func newSetPasswordCommand(o *cliOptions) *cobra.Command {
	var userID string
	cmd := &cobra.Command{
		Use:   "set-password [--user USER]",
		Short: "Set the password you (or, as an operator, another user) sign in to the web portal with",
		Long: "Set a portal password, read from standard input: typed twice without echo on a terminal, or the first line\n" +
			"of a pipe (never a flag, so that it stays out of shell history and process lists). Without --user it is\n" +
			"your own; operators may set anyone's. At least 12 characters, at most 1024 bytes, no tabs or other control characters.",
		Example: "  sombus user set-password\n  printf '%s\\n' \"$PORTAL_PASSWORD\" | sombus user set-password --user u_...",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := o.manager()
			if err != nil {
				return err
			}
			id := userID
			if id == "" {
				me, err := m.Whoami(cmd.Context())
				if err != nil {
					return err
				}
				id = me.User.ID
			}
			password, err := readPassword(cmd)
			if err != nil {
				return err
			}
			if err := m.SetPassword(cmd.Context(), id, password); err != nil {
				return err
			}
			return o.print(cmd, map[string]any{"user_id": id, "password_set": true}, func(w io.Writer) {
				fmt.Fprintf(w, "Password set for %s. Sign in at /portal/ with the user's email.\n", id)
			})
		},
	}
	cmd.Flags().StringVar(&userID, "user", "", "the user whose password to set (default: yours)")
	return cmd
}

// readPassword reads a new password from standard input: twice without
// echo from a terminal, else the first line.
func readPassword(cmd *cobra.Command) (string, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(cmd.ErrOrStderr(), "New password: ")
		first, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		fmt.Fprint(cmd.ErrOrStderr(), "Again: ")
		again, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		if string(first) != string(again) {
			return "", errors.New("the two passwords differ; nothing was changed")
		}
		return string(first), nil
	}
	b, err := io.ReadAll(io.LimitReader(in, maxPasswordInput))
	if err != nil {
		return "", fmt.Errorf("read password from standard input: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", errors.New("no password on standard input: type it at the prompt, or pipe it in as one line")
	}
	return line, nil
}
