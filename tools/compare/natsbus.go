package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	natsStream   = "COMPARE"
	natsConsumer = "compare"
)

// natsBus is NATS JetStream: a file-store stream of subjects compare.<story>
// and one durable pull consumer with explicit acks. Each worker has its
// own connection. A publish waits for the stream's acknowledgement (a
// batch: 100 asynchronous publishes, then every acknowledgement), with the
// message id as Nats-Msg-Id (JetStream's duplicate window, as sombus drops
// a message id seen again); a receive fetches up to 10 messages that are
// there (no wait, as sombus answers as soon as one is ready) and each is
// acknowledged.
type natsBus struct {
	name      string
	conns     []*nats.Conn
	js        []jetstream.JetStream
	cons      []jetstream.Consumer // the consumer, through each worker's connection
	doubleAck bool
	proc      *exec.Cmd
	dir       string
}

func newNATS(ctx context.Context, cfg config, url, server string, syncAlways, doubleAck bool) (*natsBus, error) {
	b := &natsBus{doubleAck: doubleAck}
	if server != "" {
		var err error
		if url, err = b.startServer(ctx, server, syncAlways); err != nil {
			b.Close()
			return nil, err
		}
	}
	for range cfg.workers {
		nc, err := nats.Connect(url, nats.Name("sombus compare"))
		if err != nil {
			b.Close()
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			b.Close()
			return nil, err
		}
		b.conns = append(b.conns, nc)
		b.js = append(b.js, js)
	}
	b.name = "NATS JetStream " + b.conns[0].ConnectedServerVersion() + ", file store"
	if syncAlways {
		b.name += ", sync always"
	}
	if doubleAck {
		b.name += ", acks confirmed"
	}
	return b, nil
}

// startServer runs nats-server with JetStream on a free port of 127.0.0.1
// with its store in a new temporary directory.
func (b *natsBus) startServer(ctx context.Context, bin string, syncAlways bool) (string, error) {
	dir, err := os.MkdirTemp("", "compare-nats-")
	if err != nil {
		return "", err
	}
	b.dir = dir
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	conf := filepath.Join(dir, "nats.conf")
	sync := ""
	if syncAlways {
		sync = "sync_interval: always\n"
	}
	text := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n  %s}\n", port, filepath.Join(dir, "store"), sync)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return "", err
	}
	log, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return "", err
	}
	defer log.Close()
	b.proc = exec.CommandContext(ctx, bin, "-c", conf) //nolint:gosec // the nats-server the operator named with -nats-server
	b.proc.Stdout, b.proc.Stderr = log, log
	if err := b.proc.Start(); err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			return "nats://" + addr, nil
		}
		if time.Now().After(deadline) {
			text, _ := os.ReadFile(filepath.Join(dir, "nats.log"))
			return "", fmt.Errorf("nats-server does not answer on %s: %s", addr, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *natsBus) Name() string { return b.name }

func (b *natsBus) Reset(ctx context.Context, _ int) error {
	js := b.js[0]
	if err := js.DeleteStream(ctx, natsStream); err != nil && !strings.Contains(err.Error(), "not found") {
		return err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: natsStream, Subjects: []string{"compare.>"}, Storage: jetstream.FileStorage, Replicas: 1,
	}); err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, natsStream, jetstream.ConsumerConfig{
		Durable: natsConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: -1,
	}); err != nil {
		return err
	}
	b.cons = b.cons[:0]
	for _, js := range b.js {
		c, err := js.Consumer(ctx, natsStream, natsConsumer)
		if err != nil {
			return err
		}
		b.cons = append(b.cons, c)
	}
	return nil
}

func (b *natsBus) Publish(ctx context.Context, w int, msgs []msg) error {
	js := b.js[w]
	if len(msgs) == 1 {
		_, err := js.Publish(ctx, "compare."+msgs[0].story, msgs[0].body, jetstream.WithMsgID(msgs[0].id))
		return err
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := js.PublishAsync("compare."+m.story, m.body, jetstream.WithMsgID(m.id))
		if err != nil {
			return err
		}
		futures[i] = f
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (b *natsBus) Receive(ctx context.Context, w, max int) ([]any, error) {
	batch, err := b.cons[w].FetchNoWait(max)
	if err != nil {
		return nil, err
	}
	var got []any
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if err := batch.Error(); err != nil {
		return got, err
	}
	if len(got) == 0 {
		// Nothing there now (the others hold the rest): do not spin.
		time.Sleep(time.Millisecond)
	}
	return got, nil
}

func (b *natsBus) Ack(ctx context.Context, _ int, got []any) error {
	for _, g := range got {
		m := g.(jetstream.Msg)
		var err error
		if b.doubleAck {
			err = m.DoubleAck(ctx)
		} else {
			err = m.Ack()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *natsBus) Close() {
	for _, nc := range b.conns {
		nc.Close()
	}
	if b.proc != nil && b.proc.Process != nil {
		_ = b.proc.Process.Signal(os.Interrupt)
		_ = b.proc.Wait()
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}
