package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sombus/sombus/client"
	"github.com/sombus/sombus/internal/jsonenc"
)

// batchBytes keeps a batch under the 1 MiB limit with room for the wrapper.
const batchBytes = client.MaxBatchBytes - 4096

func newPublishCommand() *cobra.Command {
	o := &cliOptions{}
	var file, msgType, correlationID, messageID, payload string
	var progress bool
	cmd := &cobra.Command{
		Use:   "publish [ENVELOPE_JSON...] [-f FILE] [--type TYPE --correlation-id STORY [--payload JSON]]",
		Short: "Publish envelopes as a producer connection",
		Long: `Publish envelopes given as JSON arguments, read from a file of JSON lines
(-f FILE, or -f - for standard input; sent in batches of up to 100, in order,
with a progress bar on a terminal), or built from --type, --correlation-id and
--payload. Each envelope's answer is printed; refused ones make the command fail.`,
		Example: `  sombus publish --type story.context --correlation-id s-1 --payload '{"text":"hi"}'
  sombus publish '{"som_version":"1.0.0","message_id":"m1","message_type":"story.context","correlation_id":"s-1","payload":{}}'
  sombus publish -f envelopes.jsonl`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := o.clientConfig()
			if err != nil {
				return err
			}
			p, err := client.NewProducer(cfg)
			if err != nil {
				return err
			}
			var envs []json.RawMessage
			if msgType != "" || correlationID != "" {
				e := client.Envelope{MessageID: messageID, MessageType: msgType, CorrelationID: correlationID}
				if payload != "" {
					if !json.Valid([]byte(payload)) {
						return errors.New("--payload is not valid JSON")
					}
					e.Payload = json.RawMessage(payload)
				}
				if e.MessageID == "" {
					e.MessageID = client.NewMessageID()
				}
				if e.SomVersion == "" {
					e.SomVersion = client.SomVersion
				}
				if e.Payload == nil {
					e.Payload = map[string]any{}
				}
				raw, _ := jsonenc.Marshal(e)
				envs = append(envs, raw)
			}
			for _, a := range args {
				envs = append(envs, json.RawMessage(a))
			}
			pub := &publisher{o: o, cmd: cmd, p: p}
			if file != "" {
				if len(envs) > 0 {
					return errors.New("give envelopes either as arguments or in a file, not both")
				}
				return pub.file(file, progress)
			}
			if len(envs) == 0 {
				return errors.New("nothing to publish: give envelopes as arguments, -f FILE, or --type and --correlation-id")
			}
			return pub.run(envs, nil)
		},
	}
	o.bindClient(cmd)
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "a file of envelopes, one JSON object a line (- for standard input)")
	f.StringVar(&msgType, "type", "", "build one envelope with this message_type")
	f.StringVar(&correlationID, "correlation-id", "", "the built envelope's correlation_id (its story)")
	f.StringVar(&messageID, "message-id", "", "the built envelope's message_id (default: a new UUID)")
	f.StringVar(&payload, "payload", "", "the built envelope's payload, a JSON object (default {})")
	f.BoolVar(&progress, "progress", false, "show a progress bar even when standard error is not a terminal")
	return cmd
}

// publisher publishes in batches and prints the answers.
type publisher struct {
	o   *cliOptions
	cmd *cobra.Command
	p   *client.Producer

	n, accepted, duplicates, refused int
	results                          []client.PublishResult // table mode: kept to print
}

// file publishes the JSON lines of path.
func (pb *publisher) file(path string, progress bool) error {
	var r io.Reader
	total := -1
	if path == "-" {
		r = pb.cmd.InOrStdin()
	} else {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		total = 0
		for _, l := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				total++
			}
		}
		r = bytes.NewReader(data)
	}
	bar := newBar(pb.cmd, total, "publish", progress)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), client.MaxBatchBytes)
	var batch []json.RawMessage
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := pb.run(batch, bar)
		batch, size = nil, 0
		return err
	}
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if len(batch) == client.MaxBatchMessages || size+len(line)+1 > batchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, append(json.RawMessage(nil), line...))
		size += len(line) + 1
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := flush(); err != nil {
		return err
	}
	_ = bar.Finish()
	return pb.done()
}

// run publishes envs (one request for one envelope, batches otherwise) and,
// without a bar (arguments), prints the summary too.
func (pb *publisher) run(envs []json.RawMessage, bar interface{ Add(int) error }) error {
	ctx := pb.cmd.Context()
	var results []client.PublishResult
	// Lines that are not JSON at all are refused here; the bus checks the rest.
	var valid []json.RawMessage
	var idx []int
	results = make([]client.PublishResult, len(envs))
	for i, e := range envs {
		if !json.Valid(e) {
			results[i] = client.PublishResult{Violations: []client.Violation{{Rule: client.RuleEnvelopeMalformed, Message: "The envelope is not valid JSON."}}}
			continue
		}
		valid = append(valid, e)
		idx = append(idx, i)
	}
	if len(valid) > 0 {
		var got []client.PublishResult
		var err error
		if len(valid) == 1 {
			var r *client.PublishResult
			r, err = pb.p.PublishRaw(ctx, valid[0])
			var ce *client.Error
			if errors.As(err, &ce) && ce.Status == 400 || errors.As(err, &ce) && ce.Status == 413 {
				r, err = &client.PublishResult{Violations: ce.Violations}, nil
			}
			if r != nil {
				got = []client.PublishResult{*r}
			}
		} else {
			got, err = pb.p.PublishBatchRaw(ctx, valid)
		}
		if err != nil {
			return fmt.Errorf("after %s: %w", plural(pb.n, "envelope", "envelopes"), err)
		}
		for j, r := range got {
			results[idx[j]] = r
		}
	}
	for _, r := range results {
		pb.n++
		switch {
		case !r.Accepted:
			pb.refused++
		case r.Duplicate:
			pb.accepted++
			pb.duplicates++
		default:
			pb.accepted++
		}
		if pb.o.json() {
			b, _ := jsonenc.Marshal(r)
			fmt.Fprintln(pb.cmd.OutOrStdout(), string(b))
		} else {
			pb.results = append(pb.results, r)
		}
	}
	if bar != nil {
		_ = bar.Add(len(envs))
		return nil
	}
	return pb.done()
}

// done prints the table and summary and fails when any envelope was refused.
func (pb *publisher) done() error {
	if !pb.o.json() {
		tw := tabwriter.NewWriter(pb.cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		all := len(pb.results) <= 20
		if all || pb.refused > 0 {
			row(tw, "#", "MESSAGE ID", "ACCEPTED", "TOPIC", "DELIVERIES", "DUPLICATE", "VIOLATIONS")
		}
		for i, r := range pb.results {
			if !all && r.Accepted {
				continue
			}
			vs := "-"
			if len(r.Violations) > 0 {
				vs = ""
				for j, v := range r.Violations {
					if j > 0 {
						vs += "; "
					}
					vs += v.Rule + ": " + v.Message
				}
			}
			row(tw, i+1, dash(r.MessageID), r.Accepted, dash(r.Topic), r.Deliveries, r.Duplicate, vs)
		}
		_ = tw.Flush()
		fmt.Fprintf(pb.cmd.OutOrStdout(), "Published %s: %d accepted (%s), %d refused.\n", plural(pb.n, "envelope", "envelopes"), pb.accepted, plural(pb.duplicates, "duplicate", "duplicates"), pb.refused)
	}
	if pb.refused > 0 {
		return fmt.Errorf("%d of %s refused", pb.refused, plural(pb.n, "envelope", "envelopes"))
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newReceiveCommand() *cobra.Command {
	o := &cliOptions{}
	var maxN int
	var wait, visibility time.Duration
	var ack, follow bool
	cmd := &cobra.Command{
		Use:   "receive [--ack] [--follow]",
		Short: "Receive messages as a consumer connection (once, or --follow to tail the queue)",
		Long: `Receive messages from your consumer connection's queue and print them.
Without --ack they stay in flight until their visibility runs out and then come
back; with --ack they are acknowledged (removed) once printed. --follow keeps
long-polling until interrupted. -o json prints one message a line, with its
receipt handle and envelope.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Checked here, so that the refusal names the flag.
			if maxN < 1 || maxN > client.MaxReceive {
				return fmt.Errorf("--max must be 1 to %d (got %d)", client.MaxReceive, maxN)
			}
			if wait < 0 || wait > client.MaxWait {
				return fmt.Errorf("--wait must be 0 to %s (got %s)", shortDuration(client.MaxWait), wait)
			}
			if visibility < 0 || visibility > client.MaxVisibility {
				return fmt.Errorf("--visibility must be 0 to %s (got %s)", shortDuration(client.MaxVisibility), visibility)
			}
			if follow && !ack && visibility == 0 && cmd.Flags().Changed("visibility") {
				// Each message would be ready again at once and received
				// again, over and over, into the dead-letter queue.
				return errors.New("--visibility 0 with --follow needs --ack: otherwise every message comes back at once, again and again, until it is dead-lettered")
			}
			cfg, err := o.clientConfig()
			if err != nil {
				return err
			}
			c, err := client.NewConsumer(cfg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			w := wait
			if w <= 0 {
				w = client.NoWait
			}
			if follow && !cmd.Flags().Changed("wait") {
				w = client.MaxWait
			}
			header := true
			vis := visibility
			if vis == 0 && cmd.Flags().Changed("visibility") {
				vis = -1 // the SDK's 0 is the server's default (60s); a negative one asks for 0
			}
			failures := 0
			for {
				msgs, err := c.Receive(ctx, client.ReceiveOptions{Max: maxN, Wait: w, Visibility: vis})
				if err != nil {
					if follow && ctx.Err() != nil {
						return nil
					}
					if follow && transient(err) {
						// --follow rides out a restart or a lost network:
						// it says so and tries again, backing off.
						failures++
						pause := min(time.Second<<min(failures-1, 5), 30*time.Second)
						fmt.Fprintf(cmd.ErrOrStderr(), "receive failed (%v); trying again in %s\n", err, pause)
						select {
						case <-ctx.Done():
							return nil
						case <-time.After(pause):
						}
						continue
					}
					return err
				}
				failures = 0
				printMessages(o, cmd, msgs, header || !follow)
				if len(msgs) > 0 {
					header = false
				}
				if ack && len(msgs) > 0 {
					if err := ackAll(ctx, cmd, c, msgs); err != nil {
						return err
					}
				}
				if !follow {
					if len(msgs) == 0 && !o.json() {
						fmt.Fprintln(cmd.ErrOrStderr(), "No messages.")
					}
					return nil
				}
			}
		},
	}
	o.bindClient(cmd)
	f := cmd.Flags()
	f.IntVar(&maxN, "max", client.MaxReceive, fmt.Sprintf("at most this many messages a receive, 1 to %d", client.MaxReceive))
	f.DurationVar(&wait, "wait", 0, "long poll: how long to wait for a message, up to 20s (default 0, 20s with --follow)")
	f.DurationVar(&visibility, "visibility", 0, "how long received messages stay hidden, up to 12h (default 60s)")
	f.BoolVar(&ack, "ack", false, "acknowledge (remove) the messages once printed")
	f.BoolVar(&follow, "follow", false, "keep receiving until interrupted")
	return cmd
}

func printMessages(o *cliOptions, cmd *cobra.Command, msgs []client.Message, header bool) {
	out := cmd.OutOrStdout()
	if o.json() {
		for _, m := range msgs {
			b, _ := jsonenc.Marshal(m)
			fmt.Fprintln(out, string(b))
		}
		return
	}
	if len(msgs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if header {
		row(tw, "MESSAGE ID", "TYPE", "STORY", "DELIVERY", "ENQUEUED", "PRODUCER", "PAYLOAD")
	}
	for _, m := range msgs {
		row(tw, m.MessageID, m.MessageType, m.CorrelationID, m.ReceiveCount, when(m.EnqueuedAt), m.ProducerID, compact(m.Payload, 60))
	}
	_ = tw.Flush()
}

// ackTimeout bounds receive --ack's acknowledgement, retries included.
const ackTimeout = 30 * time.Second

func ackAll(ctx context.Context, cmd *cobra.Command, c *client.Consumer, msgs []client.Message) error {
	hs := make([]string, len(msgs))
	for i, m := range msgs {
		hs[i] = m.ReceiptHandle
	}
	// The acknowledgement goes out even when interrupted right after
	// printing, but within a bound: a bus that stopped answering must not
	// keep the command (and every Ctrl-C after the first) for minutes.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	res, err := c.Ack(actx, hs...)
	if err != nil {
		return fmt.Errorf("acknowledge: %w", err)
	}
	for _, f := range res.Failed {
		fmt.Fprintf(cmd.ErrOrStderr(), "acknowledge failed (%s): %s\n", f.Code, f.Message)
	}
	if len(res.Failed) > 0 {
		return fmt.Errorf("acknowledge: %d of %d messages were not acknowledged (they come back when their visibility runs out)", len(res.Failed), len(hs))
	}
	return nil
}

// transient says whether a receive error may pass by itself: a refusal the
// bus marks temporary (429, 503), a network error (refused, reset), a
// connection closed early, or a timeout. Anything else (a wrong
// certificate, a revoked connection, a bad URL) ends --follow.
func transient(err error) bool {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Temporary()
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
