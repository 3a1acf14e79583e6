// Command compare measures one message-bus workload side by side on
// several systems in one run, and prints a markdown table of messages a
// second per system and phase, each with its ratio to a bare net/http
// server answering the same HTTP requests (the floor), plus p50 and p99
// latencies. See README.md for how to run the whole comparison.
//
// The workload: messages of 1 KiB spread over 1,000 stories; publish,
// single: 8 concurrent publishers, one message a request; publish, batch:
// 8 publishers, 100 messages a request; drain: 8 receivers taking up to 10
// messages at a time and acknowledging each batch, until the queue (the
// messages of both publish phases) is empty. Each run measures every
// system once, in an order that turns by one system each run; the table
// gives each figure's median over the runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sombus/sombus/internal/bench/floor"
)

// system is one bus under test. Every method may be called from several
// goroutines at once, with distinct worker numbers w (0 to workers-1).
type system interface {
	Name() string
	// Reset makes a fresh, empty queue for a run.
	Reset(ctx context.Context, run int) error
	// Publish sends msgs in one request (a single publish when there is
	// one) and returns when the system answered that it has them.
	Publish(ctx context.Context, w int, msgs []msg) error
	// Receive takes up to max messages; none is not an error.
	Receive(ctx context.Context, w, max int) ([]any, error)
	// Ack acknowledges what Receive returned, in one request where the
	// system has one.
	Ack(ctx context.Context, w int, got []any) error
	Close()
}

// msg is one message to publish: its id, story and envelope bytes.
type msg struct {
	id, story string
	body      []byte
}

type config struct {
	messages, runs, workers, stories, payload, batch, receiveMax int
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

type sombusFlags []string

func (s *sombusFlags) String() string     { return strings.Join(*s, ",") }
func (s *sombusFlags) Set(v string) error { *s = append(*s, v); return nil }

func run() error {
	var cfg config
	var sombus sombusFlags
	var (
		floorListen    = flag.String("serve-floor", "", "only serve a floor server on this address (the tool starts itself so for the floor), printing its URL")
		noFloor        = flag.Bool("no-floor", false, "leave the floor out (the ratios are then missing)")
		apiKey         = flag.String("sombus-key", os.Getenv("SOMBUS_API_KEY"), "an operator's API key for the -sombus nodes (env SOMBUS_API_KEY)")
		natsURL        = flag.String("nats", "", "a NATS server with JetStream to measure (nats://host:port)")
		natsServer     = flag.String("nats-server", "", "a nats-server binary to start on a free port with JetStream in a temporary directory, and measure")
		natsSyncAlways = flag.Bool("nats-sync-always", false, "start -nats-server with sync_interval: always (an fsync before each answer, as sombus does); the default is NATS's own (fsync every 2 minutes)")
		natsDoubleAck  = flag.Bool("nats-double-ack", false, "wait for the server to confirm each JetStream ack (default: acks are sent without waiting, the usual way)")
		pgURL          = flag.String("postgres", "", "a PostgreSQL URL whose database gets the plain SKIP LOCKED table (-pg-table) to measure")
		pgTable        = flag.String("pg-table", "compare_queue", "the plain table's name; it is dropped and created again at each run")
		order          = flag.String("order", "", "comma-separated system names in the order of the first run (default: the order of the flags above)")
	)
	flag.Var(&sombus, "sombus", "a sombus node to measure, as label=URL (repeatable: -sombus sqlite=http://127.0.0.1:8081); label=URL1,URL2 spreads the workers over nodes sharing one store and one --public-url")
	flag.IntVar(&cfg.messages, "messages", 10000, "messages per publish phase (the drain takes both phases' messages)")
	flag.IntVar(&cfg.runs, "runs", 3, "interleaved runs; the table gives medians")
	flag.IntVar(&cfg.workers, "workers", 8, "concurrent publishers, and receivers")
	flag.IntVar(&cfg.stories, "stories", 1000, "stories (correlation ids) the messages are spread over")
	flag.IntVar(&cfg.payload, "payload", 1024, "payload bytes a message")
	flag.IntVar(&cfg.batch, "batch", 100, "messages a batch publish")
	flag.IntVar(&cfg.receiveMax, "receive-max", 10, "messages a receive takes at most")
	flag.Parse()

	if *floorListen != "" {
		return serveFloor(*floorListen)
	}
	if cfg.messages < 1 || cfg.runs < 1 || cfg.workers < 1 || cfg.stories < 1 || cfg.batch < 1 || cfg.receiveMax < 1 {
		return fmt.Errorf("messages, runs, workers, stories, batch and receive-max must be at least 1")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var systems []system
	defer func() {
		for _, s := range systems {
			s.Close()
		}
	}()
	if !*noFloor {
		s, err := startFloor(ctx, cfg)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		systems = append(systems, s)
	}
	if *natsServer != "" || *natsURL != "" {
		s, err := newNATS(ctx, cfg, *natsURL, *natsServer, *natsSyncAlways, *natsDoubleAck)
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		systems = append(systems, s)
	}
	if *pgURL != "" {
		s, err := newPostgres(ctx, cfg, *pgURL, *pgTable)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		systems = append(systems, s)
	}
	for _, v := range sombus {
		label, urls, ok := strings.Cut(v, "=")
		if !ok || label == "" || urls == "" {
			return fmt.Errorf("-sombus %q: want label=URL[,URL…]", v)
		}
		if *apiKey == "" {
			return fmt.Errorf("-sombus needs an operator's API key (-sombus-key or SOMBUS_API_KEY)")
		}
		var bases []string
		for _, u := range strings.Split(urls, ",") {
			bases = append(bases, strings.TrimRight(strings.TrimSpace(u), "/"))
		}
		systems = append(systems, newSombus(cfg, "sombus, "+label, bases, *apiKey))
	}
	if len(systems) == 0 {
		return fmt.Errorf("nothing to measure")
	}
	if *order != "" {
		var sorted []system
		for _, name := range strings.Split(*order, ",") {
			i := slices.IndexFunc(systems, func(s system) bool { return s.Name() == strings.TrimSpace(name) })
			if i < 0 {
				return fmt.Errorf("-order: no system %q", name)
			}
			sorted = append(sorted, systems[i])
		}
		for _, s := range systems {
			if !slices.Contains(sorted, s) {
				sorted = append(sorted, s)
			}
		}
		systems = sorted
	}

	loadBefore := loadavg()
	started := time.Now()
	results := map[string][]phaseResults{}
	for r := range cfg.runs {
		for k := range systems {
			s := systems[(k+r)%len(systems)]
			res, err := measure(ctx, cfg, s, r)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r+1, s.Name(), err)
			}
			fmt.Fprintf(os.Stderr, "run %d %-48s single %8.0f msg/s  batch %8.0f msg/s  drain %8.0f msg/s\n",
				r+1, s.Name(), res[0].rate, res[1].rate, res[2].rate)
			results[s.Name()] = append(results[s.Name()], res)
		}
	}
	names := make([]string, len(systems))
	for i, s := range systems {
		names[i] = s.Name()
	}
	header := fmt.Sprintf("%s; %d run(s), medians; %d messages a publish phase (%d drained), %d B payloads over %d stories, %d workers, batches of %d, receives of up to %d; GOMAXPROCS %d; load average %s before, %s after; %s",
		started.UTC().Format(time.RFC3339), cfg.runs, cfg.messages, 2*cfg.messages, cfg.payload, cfg.stories, cfg.workers, cfg.batch, cfg.receiveMax,
		runtime.GOMAXPROCS(0), loadBefore, loadavg(), time.Since(started).Round(time.Second))
	table(os.Stdout, header, names, results, !*noFloor)
	return nil
}

// serveFloor serves the floor until the process is stopped, printing its
// URL on the first line of standard output.
func serveFloor(addr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url, _, err := floor.Listen(ctx, addr)
	if err != nil {
		return err
	}
	fmt.Println(url)
	<-ctx.Done()
	return nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// table prints the medians as markdown: rates with ratios to the floor
// (the first system), then latencies.
func table(w io.Writer, header string, names []string, results map[string][]phaseResults, withFloor bool) {
	med := func(name string, phase int, f func(result) float64) float64 {
		var v []float64
		for _, r := range results[name] {
			v = append(v, f(r[phase]))
		}
		return median(v)
	}
	rate := func(r result) float64 { return r.rate }
	fmt.Fprintf(w, "%s\n\n", header)
	fmt.Fprintln(w, "| system | publish, single | publish, batch | drain |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	for _, n := range names {
		row := "| " + n
		for p := range phases {
			v := med(n, p, rate)
			cell := thousands(v) + " msg/s"
			if withFloor {
				cell += fmt.Sprintf(" (%.2f)", v/med(floorName, p, rate))
			}
			row += " | " + cell
		}
		fmt.Fprintln(w, row+" |")
	}
	if withFloor {
		fmt.Fprintln(w, "\nIn brackets: the ratio to the floor's median in the same run.")
	}
	fmt.Fprintln(w, "\nLatency of a request, p50 / p99 in ms (drain: a receive and its ack):")
	fmt.Fprintln(w, "\n| system | publish, single | publish, batch | drain |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	for _, n := range names {
		row := "| " + n
		for p := range phases {
			row += fmt.Sprintf(" | %.2f / %.2f", med(n, p, func(r result) float64 { return ms(r.p50) }), med(n, p, func(r result) float64 { return ms(r.p99) }))
		}
		fmt.Fprintln(w, row+" |")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
