package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sombus/sombus/internal/loadcheck"
)

func newBenchCommand() *cobra.Command {
	o := &cliOptions{}
	var cfg loadcheck.Config
	var quiet bool
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Load a running bus and check what it delivers",
		Long: `Run publishers and receivers against a running bus and check, as it goes and
at the end, that every accepted message was delivered (LOST), that within a
story first deliveries follow the publish order and two messages are never in
flight together (ORDER), and that no message whose ack was answered OK comes
back (RESURRECTED). Duplicates are counted; delivery is at least once.

With --api-key (an operator's) it creates a workspace with a producer and a
consumer connection, on the unlimited quota tier when the key may set it,
and removes the connections afterwards unless --keep. With --producer-id,
--producer-secret, --consumer-id and --consumer-secret it uses those instead
(the consumer must subscribe to som.<message type>).

Clients retry a lost or refused answer the way the SDK does, with the same
message_id, the same receive attempt id and the same receipt handles, and go
on through 503s and connection errors, so the server may be restarted under
load. A progress line goes to standard error every --progress-every; the
report goes to standard output (-o json for scripts). The command exits
non-zero when the verdict is FAIL.`,
		Example: `  sombus bench --api-key "$KEY" --messages 20000 --publishers 8 --receivers 8 --stories 1000
  sombus bench --api-key "$KEY" --duration 1m --rate 2000 --nack-ratio 0.05 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			cfg.URL = o.baseURL()
			cfg.WorkspaceID = setting(o.workspace, "SOMBUS_WORKSPACE", "")
			// Secrets from the environment too: a flag shows in ps and in
			// the shell's history.
			cfg.ProducerSecret = setting(cfg.ProducerSecret, "SOMBUS_PRODUCER_SECRET", "")
			cfg.ConsumerSecret = setting(cfg.ConsumerSecret, "SOMBUS_CONSUMER_SECRET", "")
			if cfg.ProducerID == "" && cfg.ConsumerID == "" {
				cfg.APIKey = setting(o.global("api-key"), "SOMBUS_API_KEY", "")
				if cfg.APIKey == "" {
					return errors.New("no API key: pass --api-key or set SOMBUS_API_KEY, or give --producer-id, --producer-secret, --consumer-id and --consumer-secret")
				}
			}
			if cfg.Messages == 0 && cfg.Duration == 0 {
				cfg.Messages = 10000
			}
			if !quiet {
				cfg.ProgressWriter = cmd.ErrOrStderr()
			}
			rep, err := loadcheck.Run(cmd.Context(), cfg)
			if rep == nil {
				return err
			}
			if perr := o.print(cmd, rep, func(w io.Writer) { benchTable(w, rep) }); perr != nil {
				return perr
			}
			if err != nil {
				return err
			}
			if cmd.Context().Err() != nil {
				return errors.New("interrupted: the report covers the run so far")
			}
			if !rep.OK() {
				return fmt.Errorf("verdict FAIL: LOST %d, ORDER %d, RESURRECTED %d",
					rep.Violations[loadcheck.RuleLost], rep.Violations[loadcheck.RuleOrder], rep.Violations[loadcheck.RuleResurrected])
			}
			return nil
		},
	}
	o.bind(cmd, false)
	f := cmd.Flags()
	f.StringVarP(&o.workspace, "workspace", "w", "", "the workspace of --producer-id and --consumer-id (env SOMBUS_WORKSPACE; default: read from the access token)")
	f.StringVar(&cfg.ProducerID, "producer-id", "", "an existing producer connection's client id (instead of --api-key)")
	f.StringVar(&cfg.ProducerSecret, "producer-secret", "", "its client secret (env SOMBUS_PRODUCER_SECRET)")
	f.StringVar(&cfg.ConsumerID, "consumer-id", "", "an existing consumer connection's client id (instead of --api-key)")
	f.StringVar(&cfg.ConsumerSecret, "consumer-secret", "", "its client secret (env SOMBUS_CONSUMER_SECRET)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the connections the run created")
	f.IntVar(&cfg.Publishers, "publishers", 8, "concurrent publishers")
	f.IntVar(&cfg.Receivers, "receivers", 8, "concurrent receivers")
	f.IntVar(&cfg.Stories, "stories", 1000, "stories (correlation ids) the messages are spread over")
	f.IntVar(&cfg.Messages, "messages", 0, "messages to publish (default 10000 without --duration)")
	f.DurationVar(&cfg.Duration, "duration", 0, "publish for this long instead of a message count")
	f.IntVar(&cfg.PayloadSize, "payload-size", 1024, "payload bytes, about")
	f.IntVar(&cfg.BatchSize, "batch", 1, "envelopes a publish request (1: single publishes; up to 100)")
	f.IntVar(&cfg.ReceiveMax, "receive-max", 10, "messages a receive (1 to 10)")
	f.DurationVar(&cfg.ReceiveWait, "receive-wait", time.Second, "a receive's long poll (0 to 20s)")
	f.DurationVar(&cfg.Visibility, "visibility", 30*time.Second, "a receive's visibility timeout")
	f.Float64Var(&cfg.NackRatio, "nack-ratio", 0, "share of deliveries released (nack) instead of acknowledged, at random")
	f.Float64Var(&cfg.Rate, "rate", 0, "target publishes a second in all (0: flat out)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 2*time.Minute, "how long to wait for the last deliveries after the last publish")
	f.DurationVar(&cfg.Quiet, "quiet-period", time.Second, "how long to go on receiving after the drain, to catch messages that come back")
	f.StringVar(&cfg.MessageType, "message-type", "loadcheck.load", "the envelopes' message_type")
	f.DurationVar(&cfg.ProgressEvery, "progress-every", time.Second, "how often to print a progress line")
	f.BoolVarP(&quiet, "quiet", "q", false, "print no progress lines")
	return cmd
}

// benchTable prints a bench report for people.
func benchTable(w io.Writer, r *loadcheck.Report) {
	row(w, "verdict", r.Verdict)
	row(w, "workspace", r.Workspace)
	tier := r.QuotaTier
	if tier == "" {
		tier = "given"
	}
	row(w, "connections", fmt.Sprintf("producer %s, consumer %s (%s; removed: %v)", r.Producer, r.Consumer, tier, r.Removed))
	c := r.Config
	load := fmt.Sprintf("%d publishers, %d receivers, %d stories, %d-byte payloads, batches of %d, receive max %d wait %s visibility %s",
		c.Publishers, c.Receivers, c.Stories, c.PayloadSize, c.BatchSize, c.ReceiveMax, c.ReceiveWait, c.Visibility)
	if c.NackRatio > 0 {
		load += fmt.Sprintf(", nack ratio %g", c.NackRatio)
	}
	if c.Rate > 0 {
		load += fmt.Sprintf(", rate %g/s", c.Rate)
	}
	row(w, "load", load)
	row(w, "messages", fmt.Sprintf("accepted %d, delivered %d, deliveries %d (%d duplicates), acked %d, nacked %d, stale handles %d, foreign %d, drained %v",
		r.Accepted, r.Delivered, r.Deliveries, r.Duplicates, r.Acked, r.Nacked, r.StaleHandles, r.Foreign, r.Drained))
	row(w, "publish rate", fmt.Sprintf("%.0f msgs/s over %.1fs", r.PublishRate, r.PublishSeconds))
	row(w, "delivery rate", fmt.Sprintf("%.0f msgs/s (first deliveries; run %.1fs)", r.DeliveryRate, r.TotalSeconds))
	lat := func(name string, l loadcheck.Latency) {
		row(w, name, fmt.Sprintf("p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms (%d)", l.P50, l.P90, l.P99, l.Max, l.Count))
	}
	lat("publish→receive", r.EndToEnd)
	lat("publish request", r.Publish)
	lat("receive request", r.Receive)
	lat("ack request", r.Ack)
	row(w, "errors (retried)", countsText(r.Errors))
	row(w, "violations", fmt.Sprintf("LOST %d, ORDER %d, RESURRECTED %d",
		r.Violations[loadcheck.RuleLost], r.Violations[loadcheck.RuleOrder], r.Violations[loadcheck.RuleResurrected]))
	for _, e := range r.Examples {
		row(w, "", e)
	}
}

// countsText is "a 3, b 1" sorted by name, or "none".
func countsText(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
