// Package edge guards a node's HTTP edge: it tells who the client is when
// trusted proxies forward its requests, caps the connections one client
// address may hold open, bounds how long a request body may take to
// arrive, and learns the standard mux's own answers without their bodies.
// It depends on nothing else of sombus.
package edge

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"
)

// AddrKey groups client addresses: the port is dropped (each connection has
// its own), and IPv6 addresses count per /64, the block one client gets.
// Whatever is not an address is its own group. The token service's failure
// limits and the connection cap both count per AddrKey.
func AddrKey(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// Proxies are the address ranges of trusted proxies (load balancers): only
// a request from one of them has its X-Forwarded-For believed. The zero
// value trusts no one.
type Proxies []netip.Prefix

// ParseProxies reads a comma-separated list of CIDRs; a bare address is a
// range of that one address. "" is no proxies.
func ParseProxies(s string) (Proxies, error) {
	var ps Proxies
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR range such as 10.0.0.0/8 or fd00::/8, nor an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		ps = append(ps, p.Masked())
	}
	return ps, nil
}

// Trusts reports whether ip is in one of the ranges.
func (ps Proxies) Trusts(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// parseHost reads the address of a RemoteAddr or X-Forwarded-For entry,
// with or without a port.
func parseHost(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// ClientAddr is the address of the client that sent r. From a peer that is
// not a trusted proxy it is r.RemoteAddr as is: X-Forwarded-For is not
// believed. From a trusted proxy it is the rightmost X-Forwarded-For entry
// that is not itself a trusted proxy (the entries to its left were written
// by the client and prove nothing); when every entry is trusted, the
// leftmost. An entry that is not an address ends the walk at the trusted
// hop that passed it on.
func (ps Proxies) ClientAddr(r *http.Request) string {
	if len(ps) == 0 {
		return r.RemoteAddr
	}
	peer, ok := parseHost(r.RemoteAddr)
	if !ok || !ps.Trusts(peer) {
		return r.RemoteAddr
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		if strings.TrimSpace(hops[i]) == "" {
			continue
		}
		a, ok := parseHost(hops[i])
		if !ok {
			break
		}
		client = a
		if !ps.Trusts(a) {
			break
		}
	}
	if client == peer {
		return r.RemoteAddr
	}
	return client.String()
}

// BodyTimeoutError is the error of reading a request body that did not
// arrive within the body timeout.
type BodyTimeoutError struct {
	Timeout time.Duration
}

func (e *BodyTimeoutError) Error() string {
	return fmt.Sprintf("the request body did not arrive within %s", e.Timeout)
}

// Unwrap makes the error an os.ErrDeadlineExceeded.
func (e *BodyTimeoutError) Unwrap() error { return os.ErrDeadlineExceeded }

// Handler serves next with two guards:
//
//   - With proxies, r.RemoteAddr is the client's address (ClientAddr), so
//     that whatever counts or logs client addresses sees the client.
//   - A request that has a body must deliver it within bodyTimeout (0: no
//     limit): a read deadline is set when the request starts. net/http lifts
//     it once the body has been read to its end (from then on it reads the
//     connection only to notice a client that goes away). A handler that
//     refuses the request without reading its body is covered too: the
//     server reads what is left of the body before it answers, under the
//     same deadline, and closes the connection when it runs out (a refusal
//     of a body as too large closes it at once instead, CloseUnread). Requests
//     without a body, long polls among them, get no deadline: they may wait
//     as long as they ask. A body read that runs out returns a
//     *BodyTimeoutError.
func Handler(next http.Handler, proxies Proxies, bodyTimeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(proxies) > 0 {
			if addr := proxies.ClientAddr(r); addr != r.RemoteAddr {
				r = r.WithContext(r.Context()) // a shallow copy: r is not ours to change
				r.RemoteAddr = addr
			}
		}
		if bodyTimeout > 0 && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(bodyTimeout)) == nil {
				r = r.WithContext(r.Context())
				r.Body = &deadlineBody{ReadCloser: r.Body, timeout: bodyTimeout}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// CleanPath reports whether p is a clean path: absolute, without an empty
// segment ("//"), nor a "." or ".." segment. http.ServeMux redirects any
// other path to its cleaned form (a 301 that a client following redirects
// answers with a GET, or a 307 that has it send its POST again, elsewhere);
// sombus's routes answer such a path as the address of nothing instead.
func CleanPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.Contains(p, "//") && !strings.Contains(p, "/./") &&
		!strings.Contains(p, "/../") && !strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
}

// ParseForm parses r's form body (r.ParseForm) of at most limit bytes.
// tooLarge reports a body declared or found over limit, whose answer then
// closes the connection (CloseUnread); err is any other failure to read
// it (a *BodyTimeoutError when it did not arrive in time).
func ParseForm(w http.ResponseWriter, r *http.Request, limit int64) (tooLarge bool, err error) {
	if r.ContentLength > limit { // refused at once, without reading any of it
		CloseUnread(w, r)
		return true, nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	err = r.ParseForm()
	if _, over := errors.AsType[*http.MaxBytesError](err); over {
		CloseUnread(w, r)
		return true, nil
	}
	return false, err
}

// CloseUnread has the answer to r close its HTTP/1.x connection: r's body
// is refused as too large and left unread. Otherwise net/http reads what
// is left of a body under 256 KiB before it answers, so as to serve the
// next request on the connection, and that read waits for as long as the
// body timeout allows when the client declares more than it sends: a
// refusal that should be at once would come only then. (HTTP/2 ends the
// stream instead and keeps the connection.)
func CloseUnread(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
}

// deadlineBody names the error of a body that did not arrive in time.
type deadlineBody struct {
	io.ReadCloser
	timeout time.Duration
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = &BodyTimeoutError{Timeout: b.timeout}
	}
	return n, err
}
