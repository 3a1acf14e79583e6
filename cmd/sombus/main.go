// Command sombus is the sombus message bus: `sombus serve` runs a node; the
// other commands manage a running bus.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the command line args and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, errorMessage(err))
		return 1
	}
	return 0
}

// errorMessage is what the command prints for err: the program's name once
// (the client package starts its errors with it too), and a hint when no
// bus answered at the URL.
func errorMessage(err error) string {
	msg := "sombus: " + strings.TrimPrefix(err.Error(), "sombus: ")
	var op *net.OpError
	var ue *url.Error
	if errors.As(err, &op) && op.Op == "dial" && errors.As(err, &ue) {
		base := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			base = u.Scheme + "://" + u.Host
		}
		msg += "\n  no bus answers at " + base + ": start one with `sombus serve`, or point the command at yours with --url or SOMBUS_URL"
	}
	return msg
}
