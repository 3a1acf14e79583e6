package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/sombus/sombus/client"
)

// TestTransient: --follow waits out what may pass by itself and stops on
// what will not.
func TestTransient(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	untrusted := &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{&client.Error{Status: 503, RetryAfter: time.Second}, true},
		{&client.Error{Status: 429, RetryAfter: time.Second}, true},
		{&client.Error{Status: 401}, false},
		{&client.Error{Status: 403}, false},
		{untrusted, false},
		{errors.New("the access token has no tenant claim"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
