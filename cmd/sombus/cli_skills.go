package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	"github.com/spf13/cobra"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/strictjson"
)

func newSkillsCommand() *cobra.Command {
	o := &cliOptions{}
	cmd := &cobra.Command{Use: "skills", Short: "Read and set the skill registrations bound to a consumer connection"}
	o.bind(cmd, true)

	get := connCmd(o, "get CONSUMER", "Read a consumer's skill registrations (viewers)", client.KindConsumer,
		func(ctx context.Context, cmd *cobra.Command, m *client.Manager, ws, id string) error {
			s, err := m.GetSkills(ctx, ws, id)
			if err != nil {
				return err
			}
			return printSkills(o, cmd, s)
		})

	var file string
	put := &cobra.Command{
		Use:   "put CONSUMER [JSON] [-f FILE]",
		Short: "Replace a consumer's skill registrations (admins)",
		Long: `Replace every skill registration bound to a consumer connection. The
registrations are a JSON argument or a file (-f FILE, or -f - for standard
input): {"registrations": [...]} or the bare list, each registration
{"instance_id", "skill", "name", "values" (an object), "authority_scale" (0 to
100)}. An empty list removes them all.`,
		Example: `  sombus skills put c123 '[{"instance_id":"i1","skill":"search","name":"Search","values":{},"authority_scale":50}]'
  sombus skills put c123 -f skills.json`,
		Args: cobra.RangeArgs(1, 2), ValidArgsFunction: o.completeConnections(client.KindConsumer),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			switch {
			case len(args) == 2 && file != "":
				return errors.New("give the registrations either as an argument or in a file, not both")
			case len(args) == 2:
				data = []byte(args[1])
			case file == "-":
				var err error
				if data, err = io.ReadAll(cmd.InOrStdin()); err != nil {
					return err
				}
			case file != "":
				var err error
				if data, err = os.ReadFile(file); err != nil {
					return err
				}
			default:
				return errors.New("no registrations: give them as a JSON argument or with -f FILE")
			}
			regs, err := parseRegistrations(data)
			if err != nil {
				return err
			}
			m, ws, err := o.workspaceManager()
			if err != nil {
				return err
			}
			s, err := m.PutSkills(cmd.Context(), ws, args[0], regs)
			if err != nil {
				return err
			}
			return printSkills(o, cmd, s)
		},
	}
	put.Flags().StringVarP(&file, "file", "f", "", "a JSON file of registrations (- for standard input)")

	co := &cliOptions{}
	mine := &cobra.Command{
		Use:   "mine",
		Short: "Read your consumer connection's skill registrations with its credentials",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := co.clientConfig()
			if err != nil {
				return err
			}
			c, err := client.NewConsumer(cfg)
			if err != nil {
				return err
			}
			s, err := c.Skills(cmd.Context())
			if err != nil {
				return err
			}
			return printSkills(co, cmd, s)
		},
	}
	co.bindClient(mine)

	cmd.AddCommand(get, put, mine)
	return cmd
}

// parseRegistrations reads {"registrations": [...]} or a bare list, refusing
// members a registration does not have (a misspelt name would otherwise be
// dropped without a word).
func parseRegistrations(data []byte) ([]client.SkillRegistration, error) {
	data = bytes.TrimSpace(data)
	var regs []client.SkillRegistration
	var err error
	if len(data) > 0 && data[0] == '[' {
		err = strictJSON(data, &regs)
	} else {
		var w struct {
			Registrations []client.SkillRegistration `json:"registrations"`
		}
		err = strictJSON(data, &w)
		regs = w.Registrations
	}
	if err != nil {
		return nil, fmt.Errorf("skill registrations: %w", err)
	}
	return regs, nil
}

// strictJSON decodes one JSON value into v, refusing unknown fields and
// anything after the value, names that match a field only ignoring case
// (encoding/json would read "Values" as values) and null members.
func strictJSON(data []byte, v any) error {
	if json.Valid(data) {
		if err := strictjson.Members(data, reflect.TypeOf(v)); err != nil && err.Kind != strictjson.Unknown {
			return err // (unknown fields: the decoder's words, below)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

func printSkills(o *cliOptions, cmd *cobra.Command, s *client.Skills) error {
	return o.print(cmd, s, func(w io.Writer) {
		if len(s.Registrations) == 0 {
			fmt.Fprintln(w, "No skill registrations.")
			return
		}
		row(w, "INSTANCE ID", "SKILL", "NAME", "AUTHORITY", "VALUES")
		for _, r := range s.Registrations {
			row(w, r.InstanceID, r.Skill, r.Name, r.AuthorityScale, compact(r.Values, 60))
		}
	})
}
