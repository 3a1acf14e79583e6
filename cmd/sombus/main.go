// Command sombus is the sombus message bus: `sombus serve` runs a node; the
// other commands manage a running bus.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sombus:", err)
		os.Exit(1)
	}
}
