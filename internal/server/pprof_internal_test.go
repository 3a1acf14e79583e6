package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestPprofListenLoopbackOnly(t *testing.T) {
	ctx := context.Background()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.com:6060", "10.1.2.3:6060", "nonsense"} {
		if ln, err := listenPprof(ctx, addr); err == nil {
			_ = ln.Close()
			t.Errorf("--pprof-listen %q: accepted, want refused (not loopback)", addr)
		}
	}
	if ln, err := listenPprof(ctx, ""); ln != nil || err != nil {
		t.Errorf(`--pprof-listen "": %v, %v; want nothing`, ln, err)
	}
	ln, err := listenPprof(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.servePprof(ln)
	defer s.pprof.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "goroutine profile") {
		t.Errorf("goroutine profile: status %d: %.200s", resp.StatusCode, b)
	}
}
