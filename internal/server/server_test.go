package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server"
	"github.com/sombus/sombus/internal/server/servertest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sombus test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestServesHTTPSWithHTTP2(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	srv, err := server.New(context.Background(), server.Config{
		Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db"),
		TLSCert: certFile, TLSKey: keyFile, BootstrapKey: servertest.BootstrapKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if !strings.HasPrefix(srv.URL, "https://") {
		t.Fatalf("URL %s is not https", srv.URL)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("status %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	// The URLs shown with a new secret use the https base.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/manage/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+servertest.BootstrapKey)
	resp2, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 200 {
		t.Fatalf("whoami over TLS: %d", resp2.StatusCode)
	}
}

func TestTLSFlagsGoTogether(t *testing.T) {
	t.Parallel()
	_, err := server.New(context.Background(), server.Config{Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(t.TempDir(), "s.db"), TLSCert: "x.pem"})
	if err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key") {
		t.Fatalf("err = %v", err)
	}
}

// Without a bootstrap key the first start prints a generated one once on
// standard output, never in the log; the second start prints none.
func TestGeneratedBootstrapKeyShownOnce(t *testing.T) {
	t.Parallel()
	store := "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db")
	var out bytes.Buffer
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(context.Background(), server.Config{Listen: "127.0.0.1:0", Store: store, Stdout: &out, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`sbk_[A-Za-z0-9_-]{20,}`).FindString(out.String())
	if key == "" {
		t.Fatalf("no generated key on standard output: %q", out.String())
	}
	req, _ := http.NewRequest("GET", srv.URL+"/v1/manage/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("generated key refused: %d", resp.StatusCode)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), key) {
		t.Fatal("the generated key appears in the log")
	}
	out.Reset()
	srv2, err := server.New(context.Background(), server.Config{Listen: "127.0.0.1:0", Store: store, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	if strings.Contains(out.String(), "sbk_") {
		t.Fatalf("second start printed a key: %q", out.String())
	}
}

func TestBadStoreAndRetentionRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []server.Config{
		{Listen: "127.0.0.1:0", Store: "mysql://x"},
		{Listen: "127.0.0.1:0", Store: "sqlite:"},
		{Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(t.TempDir(), "a.db"), Retention: 30 * time.Second},
		{Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(t.TempDir(), "b.db"), Retention: 15 * 24 * time.Hour},
	} {
		if srv, err := server.New(context.Background(), c); err == nil {
			_ = srv.Close()
			t.Errorf("%+v accepted", c)
		}
	}
}

// A connection a client opened and never used does not make the stop fail:
// after the grace the node closes it.
func TestStopWithAnUnusedConnection(t *testing.T) {
	t.Parallel()
	srv, err := server.New(context.Background(), server.Config{
		Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db"),
		BootstrapKey: servertest.BootstrapKey, ShutdownGrace: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begun := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatalf("close with an unused connection open: %v", err)
	}
	if d := time.Since(begun); d > 3*time.Second {
		t.Fatalf("close took %v", d)
	}
}

// A bootstrap key shorter than 32 characters is refused with a message
// naming the flag, its environment variable and the limit, never the key.
func TestShortBootstrapKeyRefused(t *testing.T) {
	t.Parallel()
	short := "sbk_choose-a-long-random-key" // 28 characters
	_, err := server.New(context.Background(), server.Config{Listen: "127.0.0.1:0",
		Store: "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db"), BootstrapKey: short})
	if err == nil {
		t.Fatal("a 28-character bootstrap key was accepted")
	}
	for _, want := range []string{"--bootstrap-key", "SOMBUS_BOOTSTRAP_KEY", "32"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), short) {
		t.Fatalf("error shows the key: %q", err)
	}
}

// A bootstrap key given to a store that already has users is not used; the
// node says so in its log, with the reason.
func TestIgnoredBootstrapKeyWarns(t *testing.T) {
	t.Parallel()
	store := "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db")
	srv, err := server.New(context.Background(), server.Config{Listen: "127.0.0.1:0", Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv2, err := server.New(context.Background(), server.Config{Listen: "127.0.0.1:0", Store: store,
		BootstrapKey: servertest.BootstrapKey, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "bootstrap key") && strings.Contains(line, "already has users") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no warning that the bootstrap key was ignored; log:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), servertest.BootstrapKey) {
		t.Fatal("the bootstrap key appears in the log")
	}
}

// hangingClose is a store whose Close does not return until released, as
// when the database stopped answering with calls in flight.
type hangingClose struct {
	bus.Store
	release chan struct{}
}

func (h *hangingClose) Close() error {
	<-h.release
	return h.Store.Close()
}

// TestCloseDoesNotWaitForAHungStore: a store whose Close hangs holds the
// node's Close for the rest of the shutdown grace only (5 s at least);
// then it stops, saying so.
func TestCloseDoesNotWaitForAHungStore(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	hung := &hangingClose{release: make(chan struct{})}
	defer close(hung.release)
	srv, err := server.New(context.Background(), server.Config{
		Listen: "127.0.0.1:0", Store: "sqlite:" + filepath.Join(servertest.TempDir(t), "s.db"),
		ShutdownGrace: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		WrapStore: func(s bus.Store) bus.Store { hung.Store = s; return hung },
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = srv.Close()
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Close took %s with a hung store", took)
	}
	if err == nil || !strings.Contains(err.Error(), "not closed within") || !strings.Contains(logs.String(), "did not close within the shutdown grace") {
		t.Fatalf("Close: %v; log:\n%s", err, logs.String())
	}
}
