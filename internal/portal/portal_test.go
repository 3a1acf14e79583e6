package portal_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/portal"
	"github.com/sombus/sombus/internal/server/servertest"
	"github.com/sombus/sombus/internal/store/postgres/pgtest"
)

// operatorPassword is the password tests give the bootstrap operator.
const operatorPassword = "operator-password-123"

// startNode starts a node whose operator has operatorPassword.
func startNode(t *testing.T) *servertest.Node {
	t.Helper()
	n := servertest.Start(t, servertest.Options{})
	setPassword(t, n, "", operatorPassword)
	return n
}

// setPassword sets a user's password as the operator ("" is the operator).
func setPassword(t *testing.T, n *servertest.Node, userID, password string) {
	t.Helper()
	svc := n.Server.Service()
	a, err := svc.AuthenticateAPIKey(context.Background(), servertest.BootstrapKey)
	if err != nil {
		t.Fatal(err)
	}
	if userID == "" {
		userID = a.User.ID
	}
	if err := svc.SetPassword(context.Background(), a, userID, password); err != nil {
		t.Fatal(err)
	}
}

// browser is an HTTP client with cookies that does not follow redirects.
type browser struct {
	t    *testing.T
	n    *servertest.Node
	c    *http.Client
	last string // the last page's body
}

func newBrowser(t *testing.T, n *servertest.Node) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, n: n, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values) *http.Response {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.n.URL+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	b.last = string(raw)
	return resp
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the last page.
func (b *browser) csrf() string {
	b.t.Helper()
	m := csrfField.FindStringSubmatch(b.last)
	if m == nil {
		b.t.Fatalf("no csrf field on the page:\n%s", b.last)
	}
	return m[1]
}

func (b *browser) signIn(email, password string) *http.Response {
	b.t.Helper()
	b.do("GET", "/portal/signin", nil)
	return b.do("POST", "/portal/signin", url.Values{"csrf": {b.csrf()}, "email": {email}, "password": {password}})
}

func TestPortalHeadersAndRedirects(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	resp := b.do("GET", "/portal", nil)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/portal/" {
		t.Fatalf("/portal: %d to %q, want 301 to /portal/", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = b.do("GET", "/portal/", nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/portal/signin") {
		t.Fatalf("/portal/ signed out: %d to %q, want 303 to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = b.do("GET", "/portal/signin", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("sign-in page: %d", resp.StatusCode)
	}
	for k, want := range map[string]string{
		"Content-Security-Policy": portal.ContentSecurityPolicy,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
		"Cache-Control":           "no-store",
		// Plain HTTP: no HSTS (it would be ignored, and the portal is not
		// promising HTTPS).
		"Strict-Transport-Security": "",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	inline := strings.Contains(b.last, "style=") || strings.Contains(b.last, "<style")
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(b.last, -1) {
		inline = inline || !strings.Contains(tag, ` src="/portal/static/`)
	}
	if inline || strings.Contains(b.last, " on") && regexp.MustCompile(`<[^>]+\son[a-z]+=`).MatchString(b.last) {
		t.Error("the sign-in page has an inline script, handler or style")
	}
	resp = b.do("GET", "/portal/static/portal.css", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") {
		t.Fatalf("portal.css: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("Content-Security-Policy") == "" {
		t.Error("a static asset has no Content-Security-Policy")
	}
	// The API is untouched.
	if r := n.Do("GET", "/v1/manage/whoami", servertest.BootstrapKey, nil); r.Status != 200 {
		t.Fatalf("whoami: %d", r.Status)
	}
	if r := n.Do("GET", "/portalx", "", nil); r.Status != 404 || r.Rule() != bus.RuleRouteNotFound {
		t.Fatalf("/portalx: %d %s, want the API's 404", r.Status, r.Rule())
	}
}

func TestPortalSignInAndOut(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	resp := b.signIn("operator@localhost", "wrong password!")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(b.last, "Wrong email or password.") {
		t.Fatalf("wrong password: %d", resp.StatusCode)
	}
	resp = b.signIn("nobody@example.com", "wrong password!")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(b.last, "Wrong email or password.") {
		t.Fatalf("unknown email: %d", resp.StatusCode)
	}
	resp = b.signIn("Operator@Localhost", operatorPassword)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/portal/" {
		t.Fatalf("sign in: %d to %q:\n%s", resp.StatusCode, resp.Header.Get("Location"), b.last)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "sombus_session" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Path != "/portal/" || cookie.Secure {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Lax, Path=/portal/, not Secure on plain HTTP", cookie)
	}
	resp = b.do("GET", "/portal/", nil)
	if resp.StatusCode != 200 || !strings.Contains(b.last, "No workspaces yet") {
		t.Fatalf("workspaces: %d\n%s", resp.StatusCode, b.last)
	}
	resp = b.do("POST", "/portal/workspaces", url.Values{"csrf": {b.csrf()}, "name": {"Payments"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("create workspace: %d\n%s", resp.StatusCode, b.last)
	}
	resp = b.do("GET", resp.Header.Get("Location"), nil)
	if resp.StatusCode != 200 || !strings.Contains(b.last, "Workspace created") || !strings.Contains(b.last, "operator@localhost") {
		t.Fatalf("workspace page: %d\n%s", resp.StatusCode, b.last)
	}
	resp = b.do("POST", "/portal/signout", url.Values{"csrf": {b.csrf()}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	// The old cookie no longer opens a session, even sent again.
	b.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: strings.TrimPrefix(n.URL, "http://"), Path: "/portal/"}, []*http.Cookie{cookie})
	resp = b.do("GET", "/portal/", nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/portal/signin") {
		t.Fatalf("after sign-out: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestPortalCSRF(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	b.do("GET", "/portal/signin", nil)
	if resp := b.do("POST", "/portal/signin", url.Values{"email": {"operator@localhost"}, "password": {operatorPassword}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in without its token: %d, want 403", resp.StatusCode)
	}
	if resp := b.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	b.do("GET", "/portal/", nil)
	good := b.csrf()
	for name, form := range map[string]url.Values{
		"without": {"name": {"X"}},
		"wrong":   {"name": {"X"}, "csrf": {changeLast(good)}},
		"empty":   {"name": {"X"}, "csrf": {""}},
	} {
		resp := b.do("POST", "/portal/workspaces", form)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(b.last, "Form refused") {
			t.Errorf("%s token: %d, want 403 with the refusal page", name, resp.StatusCode)
		}
	}
	b.do("GET", "/portal/", nil)
	if !strings.Contains(b.last, "No workspaces yet") {
		t.Fatal("a refused form created a workspace")
	}
}

// changeLast returns token with its last character changed.
func changeLast(token string) string {
	if strings.HasSuffix(token, "A") {
		return token[:len(token)-1] + "B"
	}
	return token[:len(token)-1] + "A"
}

func TestPortalSessionExpires(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	if resp := b.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	clock := n.ManualClock()
	// Used every 50 minutes, the session lives on past the idle hour…
	for range 3 {
		clock.Advance(50 * time.Minute)
		if resp := b.do("GET", "/portal/", nil); resp.StatusCode != 200 {
			t.Fatalf("within the idle bound: %d", resp.StatusCode)
		}
	}
	// …but not an hour without use.
	clock.Advance(time.Hour)
	resp := b.do("GET", "/portal/password", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/portal/signin?next=%2Fportal%2Fpassword&ended=1" {
		t.Fatalf("idle session: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Nor past the absolute bound, however often used.
	if resp := b.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in again: %d", resp.StatusCode)
	}
	for range 12 { // 11 h 48 min
		clock.Advance(59 * time.Minute)
		if resp := b.do("GET", "/portal/", nil); resp.StatusCode != 200 {
			t.Fatalf("within the absolute bound: %d", resp.StatusCode)
		}
	}
	clock.Advance(12 * time.Minute)
	if resp := b.do("GET", "/portal/", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("past 12 hours: %d, want a redirect to sign in", resp.StatusCode)
	}
}

func TestPortalSignInFailureLimit(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	// 20 failures a minute for one email (in any case) block it, even with
	// the right password, and the refusal says how long to wait.
	for i := range 20 {
		email := "operator@localhost"
		if i%2 == 1 {
			email = "OPERATOR@localhost"
		}
		if resp := b.signIn(email, "wrong password number"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d", i+1, resp.StatusCode)
		}
	}
	resp := b.signIn("operator@localhost", operatorPassword)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(b.last, "Too many failed sign-ins") {
		t.Fatalf("21st attempt: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// An unknown email is limited alike: the answer does not tell.
	for range 20 {
		b.signIn("nobody@example.com", "wrong password number")
	}
	if resp := b.signIn("nobody@example.com", "wrong password number"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("unknown email past the limit: %d, want 429 as for a known one", resp.StatusCode)
	}
	// After the window the right password signs in.
	n.ManualClock().Advance(time.Minute)
	if resp := b.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after the window: %d", resp.StatusCode)
	}
}

func TestPortalSecureCookieWithHTTPSPublicURL(t *testing.T) {
	n := servertest.Start(t, servertest.Options{PublicURL: "https://bus.example.com"})
	setPassword(t, n, "", operatorPassword)
	b := newBrowser(t, n)
	// The jar keeps Secure cookies away from http: read Set-Cookie itself.
	resp := b.do("GET", "/portal/signin", nil)
	var signin *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "sombus_signin" {
			signin = c
		}
	}
	if signin == nil || !signin.Secure || !signin.HttpOnly {
		t.Fatalf("sign-in form cookie %+v: want Secure and HttpOnly", signin)
	}
	if hsts := resp.Header.Get("Strict-Transport-Security"); hsts != "max-age=31536000" {
		t.Fatalf("Strict-Transport-Security %q over an https public URL, want max-age=31536000", hsts)
	}
	req, _ := http.NewRequest("POST", n.URL+"/portal/signin", strings.NewReader(url.Values{
		"csrf": {signin.Value}, "email": {"operator@localhost"}, "password": {operatorPassword}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(signin)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	var sess *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "sombus_session" {
			sess = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || sess == nil || !sess.Secure || !sess.HttpOnly || sess.SameSite != http.SameSiteLaxMode || sess.Path != "/portal/" {
		t.Fatalf("sign in: %d, session cookie %+v", resp.StatusCode, sess)
	}
}

func TestPortalErrorPagesHaveHeaders(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	b.signIn("operator@localhost", operatorPassword)
	for path, want := range map[string]int{
		"/portal/nothing-here":                              http.StatusNotFound,
		"/portal/workspaces/w00000000000000000000000000":    http.StatusNotFound,
		"/portal/workspaces/" + url.PathEscape("bad\x01id"): http.StatusNotFound,
	} {
		resp := b.do("GET", path, nil)
		if resp.StatusCode != want || resp.Header.Get("Content-Security-Policy") != portal.ContentSecurityPolicy ||
			resp.Header.Get("Cache-Control") != "no-store" || !strings.Contains(b.last, "<h1") {
			t.Errorf("%s: %d, CSP %q, want %d with the portal's headers and an error page", path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"), want)
		}
	}
	resp := b.do("DELETE", "/portal/", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("DELETE /portal/: %d", resp.StatusCode)
	}
	// A "next" outside the portal is ignored after signing in.
	b2 := newBrowser(t, n)
	b2.do("GET", "/portal/signin?next="+url.QueryEscape("//evil.example/portal/"), nil)
	if strings.Contains(b2.last, "evil.example") {
		t.Error("the sign-in page carries a next address outside the portal")
	}
	resp = b2.do("POST", "/portal/signin", url.Values{"csrf": {b2.csrf()}, "email": {"operator@localhost"}, "password": {operatorPassword},
		"next": {"https://evil.example/"}})
	if resp.Header.Get("Location") != "/portal/" {
		t.Errorf("next outside the portal: redirected to %q", resp.Header.Get("Location"))
	}
}

// TestPortalSessionSharedByNodes: nodes sharing a PostgreSQL database share
// sessions: signed in on one, the cookie opens the portal on the other, and
// signing out on the other ends it on both.
func TestPortalSessionSharedByNodes(t *testing.T) {
	store := pgtest.URL(t)
	clock := bus.NewManualClock(time.Date(2026, 9, 25, 10, 15, 2, 0, time.UTC))
	a := servertest.Start(t, servertest.Options{Store: store, Clock: clock})
	b := servertest.Start(t, servertest.Options{Store: store, Clock: clock})
	setPassword(t, a, "", operatorPassword)

	ba := newBrowser(t, a)
	if resp := ba.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in on node a: %d", resp.StatusCode)
	}
	var token string
	for _, c := range ba.c.Jar.Cookies(&url.URL{Scheme: "http", Host: strings.TrimPrefix(a.URL, "http://"), Path: "/portal/"}) {
		if c.Name == "sombus_session" {
			token = c.Value
		}
	}
	bb := newBrowser(t, b)
	bb.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: strings.TrimPrefix(b.URL, "http://"), Path: "/portal/"},
		[]*http.Cookie{{Name: "sombus_session", Value: token, Path: "/portal/"}})
	if resp := bb.do("GET", "/portal/", nil); resp.StatusCode != 200 || !strings.Contains(bb.last, "Workspaces") {
		t.Fatalf("node a's session on node b: %d", resp.StatusCode)
	}
	if resp := bb.do("POST", "/portal/signout", url.Values{"csrf": {bb.csrf()}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out on node b: %d", resp.StatusCode)
	}
	if resp := ba.do("GET", "/portal/", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("node a after signing out on node b: %d, want a redirect to sign in", resp.StatusCode)
	}
}

// onBothStores runs fn as a subtest on a node of each store (a fresh
// SQLite file; a fresh PostgreSQL schema), the operator's password set.
func onBothStores(t *testing.T, fn func(t *testing.T, n *servertest.Node)) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			o := servertest.Options{}
			if store == "postgres" {
				o.Store = pgtest.URL(t)
			}
			n := servertest.Start(t, o)
			setPassword(t, n, "", operatorPassword)
			fn(t, n)
		})
	}
}

// TestPortalSignInLimitsApartFromTokens: failed token requests do not
// count against the portal's sign-ins, on both stores: neither 100 wrong
// client secrets from an address, nor 20 token requests whose client id
// is a portal user's key, keep that user from signing in from it.
func TestPortalSignInLimitsApartFromTokens(t *testing.T) {
	onBothStores(t, func(t *testing.T, n *servertest.Node) {
		for i := range 100 {
			id := fmt.Sprintf("c-unknown-%d", i)
			if i < 20 {
				id = "portal:operator@localhost"
			}
			if r := n.TokenResponse(id, "wrong secret"); r.Status != http.StatusUnauthorized {
				t.Fatalf("token request %d: %d, want 401", i+1, r.Status)
			}
		}
		if r := n.TokenResponse("c-unknown-x", "wrong secret"); r.Status != http.StatusTooManyRequests {
			t.Fatalf("token request past the address's limit: %d, want 429", r.Status)
		}
		b := newBrowser(t, n)
		if resp := b.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-in after 100 failed token requests from its address, 20 of them for its key: %d, want 303\n%.300s",
				resp.StatusCode, b.last)
		}
	})
}

// TestPortalHostileEmails: an email holding NUL or a byte that is not
// UTF-8 (in the address, or in a comment around it, which Go's address
// parser accepts) never reaches the store, which PostgreSQL would answer
// with an error: signing in with one is the usual "Wrong email or
// password", adding a member by one names the field; the same on both
// stores.
func TestPortalHostileEmails(t *testing.T) {
	onBothStores(t, func(t *testing.T, n *servertest.Node) {
		b := newBrowser(t, n)
		for _, email := range []string{"a@b.c (\x00)", "a@b.c (\xff)", "a\x00@b.c", "\xff@b.c", strings.Repeat("a", 5000) + "@b.c", "operator@localhost (x)"} {
			if resp := b.signIn(email, operatorPassword); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(b.last, "Wrong email or password.") {
				t.Fatalf("sign in as %.40q: %d\n%.300s", email, resp.StatusCode, b.last)
			}
		}
		if resp := b.signIn("operator@localhost", operatorPassword); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign in: %d", resp.StatusCode)
		}
		b.do("GET", "/portal/", nil)
		resp := b.do("POST", "/portal/workspaces", url.Values{"csrf": {b.csrf()}, "name": {"Payments"}})
		page, _, _ := strings.Cut(resp.Header.Get("Location"), "?")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(page, "/portal/workspaces/w") {
			t.Fatalf("create workspace: %d to %q", resp.StatusCode, page)
		}
		for _, email := range []string{"a\x00@b.c", "\xff@b.c", "a@b.c (\x00)", strings.Repeat("a", 5000) + "@b.c"} {
			b.do("GET", page, nil)
			resp := b.do("POST", page+"/members", url.Values{"csrf": {b.csrf()}, "email": {email}, "role": {"viewer"}})
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.last, "email must be a plain e-mail address") {
				t.Fatalf("add member %.40q: %d\n%.300s", email, resp.StatusCode, b.last)
			}
		}
		b.do("GET", page, nil)
		if resp := b.do("POST", page+"/members", url.Values{"csrf": {b.csrf()}, "email": {"nobody@example.com"}, "role": {"viewer"}}); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("add an unknown member: %d, want 404", resp.StatusCode)
		}
	})
}

// TestPortalConcurrentSignInsAreCounted: sign-ins sent all at once take
// turns for the password slots, each checking the failure limit after the
// failures counted before it, so a burst cannot get more than the limit
// (plus the attempts running beside the last one) past it.
func TestPortalConcurrentSignInsAreCounted(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	b.do("GET", "/portal/signin", nil)
	form := url.Values{"csrf": {b.csrf()}, "email": {"operator@localhost"}, "password": {"wrong password number"}}
	const burst = 60
	codes := make(chan int, burst)
	var wg sync.WaitGroup
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", n.URL+"/portal/signin", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := b.c.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	counts := map[int]int{}
	for c := range codes {
		counts[c]++
	}
	most := 20 + bus.PasswordWorkSlots() - 1
	if counts[http.StatusUnauthorized] < 20 || counts[http.StatusUnauthorized] > most || counts[http.StatusUnauthorized]+counts[http.StatusTooManyRequests] != burst {
		t.Fatalf("%d concurrent wrong sign-ins: %v; want 20 to %d answered 401, the rest 429", burst, counts, most)
	}
}

// TestPortalSlowForm: a form whose body does not arrive within
// --body-timeout is refused saying so and naming the limit, not as an
// unreadable form.
func TestPortalSlowForm(t *testing.T) {
	n := servertest.Start(t, servertest.Options{BodyTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// Half of the body, then nothing.
	if _, err := fmt.Fprintf(conn, "POST /portal/signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nemail=a%%40b.c&pass"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "did not arrive within 300ms") {
		t.Fatalf("a slow form: %d, want 400 naming the body timeout\n%s", resp.StatusCode, raw)
	}
}

// TestPortalStaticNotFound: the assets' folder lists nothing, and an asset
// that does not exist gets the portal's not-found page, as every other
// address under /portal/ does.
func TestPortalStaticNotFound(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	for _, path := range []string{"/portal/static/", "/portal/static/nothing.js", "/portal/static/index.html"} {
		resp := b.do("GET", path, nil)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(b.last, "There is no portal page at this address.") || strings.Contains(b.last, "copy.js") {
			t.Errorf("GET %s: %d, want the portal's 404 page\n%s", path, resp.StatusCode, b.last)
		}
	}
	if resp := b.do("GET", "/portal/static/copy.js", nil); resp.StatusCode != http.StatusOK || !strings.Contains(b.last, "data-copy") {
		t.Errorf("GET copy.js: %d", resp.StatusCode)
	}
}

// TestPortalRefusalsAreCut: a refusal quoting what was sent (an id of the
// address, a field of the form) is cut past 1 KiB, saying how much it left
// out, as the API's refusals are.
func TestPortalRefusalsAreCut(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	b.signIn("operator@localhost", operatorPassword)
	ws := n.Workspace("Cut")
	long := strings.Repeat("a", 5000)
	b.wantStatus("a long workspace id", b.do("GET", "/portal/workspaces/"+long, nil), 404)
	if strings.Contains(b.last, long[:1100]) || !strings.Contains(b.last, "bytes cut)") {
		t.Errorf("the refusal of a 5000-byte id is not cut:\n%.2000s", b.last)
	}
	b.do("GET", "/portal/workspaces/"+ws+"/consumers", nil)
	b.wantStatus("a long quota tier", b.post("/portal/workspaces/"+ws+"/connections", url.Values{"name": {"c"}, "kind": {"consumer"}, "quota_tier": {long}}), 400)
	if strings.Contains(b.last, long[:1100]) || !strings.Contains(b.last, "bytes cut)") {
		t.Errorf("the refusal of a 5000-byte quota tier is not cut:\n%.2000s", b.last)
	}
}

// TestPortalSignInEndsReplacedSession: a sign-in sent by a browser that
// holds a live session (a sign-in page left open, then signed in
// elsewhere in the same browser) ends that session on the server, not
// only in the browser: its cookie, sent again, opens nothing.
func TestPortalSignInEndsReplacedSession(t *testing.T) {
	_, first, _ := signedInOperator(t)
	n := first.n
	u := &url.URL{Scheme: "http", Host: strings.TrimPrefix(n.URL, "http://"), Path: "/portal/"}
	session := func(b *browser) string {
		for _, c := range b.c.Jar.Cookies(u) {
			if c.Name == "sombus_session" {
				return c.Value
			}
		}
		return ""
	}
	old := session(first)
	if old == "" {
		t.Fatal("no session cookie after signing in")
	}
	// The sign-in page, opened before the session existed.
	b := newBrowser(t, n)
	b.do("GET", "/portal/signin", nil)
	csrf := b.csrf()
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "sombus_session", Value: old, Path: "/portal/"}})
	if resp := b.do("POST", "/portal/signin", url.Values{"csrf": {csrf}, "email": {"operator@localhost"}, "password": {operatorPassword}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in over a live session: %d\n%s", resp.StatusCode, b.last)
	}
	if now := session(b); now == "" || now == old {
		t.Fatalf("after the sign-in the session cookie is missing or unchanged (missing: %v)", now == "")
	}
	if resp := b.do("GET", "/portal/", nil); resp.StatusCode != 200 {
		t.Fatalf("the new session: %d, want 200", resp.StatusCode)
	}
	if resp := first.do("GET", "/portal/", nil); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/portal/signin") {
		t.Fatalf("the replaced session: %d to %q, want a redirect to sign in", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestPortalRoleFormOfRemovedMember: a "Save role" form drawn before its
// member was removed (another owner's tab, a page left open) does not add
// them back, and says why above the members' list, where the removed
// member's row no longer is; so does a second removal.
func TestPortalRoleFormOfRemovedMember(t *testing.T) {
	n, b, ws := signedInOperator(t)
	ada := addMember(t, n, ws, "Ada", "ada@example.com", "developer")
	page := "/portal/workspaces/" + ws
	b.do("GET", page, nil)
	b.wantStatus("remove", b.post(page+"/members/"+ada+"/remove", nil), http.StatusSeeOther)
	b.do("GET", page, nil)
	b.wantStatus("the old role form", b.post(page+"/members/"+ada, url.Values{"role": {"viewer"}}), http.StatusNotFound)
	b.wantText("is not a member of workspace", "nothing was changed")
	if !strings.Contains(b.last, `class="form-error"`) {
		t.Errorf("the refusal is not shown:\n%s", b.last)
	}
	if r := n.Do("GET", "/v1/manage/workspaces/"+ws, servertest.BootstrapKey, nil); r.Status != 200 || strings.Contains(string(r.Body), ada) {
		t.Fatalf("after the old role form the workspace is %d %s; want Ada still removed", r.Status, r.Body)
	}
	b.wantStatus("a second removal", b.post(page+"/members/"+ada+"/remove", nil), http.StatusNotFound)
	b.wantText("is not a member of workspace")
	if !strings.Contains(b.last, `class="form-error"`) {
		t.Errorf("the refusal of a second removal is not shown:\n%s", b.last)
	}
}

// TestPortalNextStaysInThePortal: the address to go back to after signing
// in is followed only when it is a portal page, also once the redirect has
// tidied its dot segments and a browser has decoded it; anything else goes
// to the portal's home. Checked with a signed-in browser at the sign-in
// page (which goes straight to next) and with the sign-in form.
func TestPortalNextStaysInThePortal(t *testing.T) {
	n, b, _ := signedInOperator(t)
	for next, want := range map[string]string{
		"/portal/password":                    "/portal/password",
		"/portal/workspaces?cursor=a..b":      "/portal/workspaces?cursor=a..b",
		"/portal/../../evil":                  "/portal/",
		"/portal/..//evil.example":            "/portal/",
		"/portal/../v1/manage/whoami":         "/portal/",
		"/portal/x/../signout":                "/portal/",
		"/portal/./signin":                    "/portal/",
		"/portal/%2e%2e/v1/manage/whoami":     "/portal/",
		"/portal/%2E./evil":                   "/portal/",
		"/portal/%73ignout":                   "/portal/",
		"/portal/%5c%5cevil.example":          "/portal/",
		"/portal/#/../../v1/manage/whoami":    "/portal/",
		"/portal/x#/../../../v1/openapi.json": "/portal/",
		"/portal/%zz":                         "/portal/",
		"/portal/static/portal.css":           "/portal/",
		"//evil.example/portal/":              "/portal/",
		"/portal/\\evil.example":              "/portal/",
	} {
		resp := b.do("GET", "/portal/signin?next="+url.QueryEscape(next), nil)
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || got != want {
			t.Errorf("signed in, next %q: %d to %q, want 303 to %q", next, resp.StatusCode, got, want)
		}
		fresh := newBrowser(t, n)
		fresh.do("GET", "/portal/signin", nil)
		resp = fresh.do("POST", "/portal/signin", url.Values{"csrf": {fresh.csrf()}, "email": {"operator@localhost"},
			"password": {operatorPassword}, "next": {next}})
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || got != want {
			t.Errorf("signing in, next %q: %d to %q, want 303 to %q", next, resp.StatusCode, got, want)
		}
	}
}

// TestPortalPasswordChangeRenewsSession: changing one's password in the
// portal ends every session of the user, the one that changed it too (a
// copy of its cookie opens nothing afterwards); the browser goes on in a
// new session with a new form token.
func TestPortalPasswordChangeRenewsSession(t *testing.T) {
	_, b, _ := signedInOperator(t)
	n := b.n
	u := &url.URL{Scheme: "http", Host: strings.TrimPrefix(n.URL, "http://"), Path: "/portal/"}
	session := func() string {
		for _, c := range b.c.Jar.Cookies(u) {
			if c.Name == "sombus_session" {
				return c.Value
			}
		}
		return ""
	}
	old := session()
	b.do("GET", "/portal/password", nil)
	oldCSRF := b.csrf()
	resp := b.post("/portal/password", url.Values{"current": {operatorPassword}, "password": {"a brand new password"}, "confirm": {"a brand new password"}})
	b.wantStatus("change the password", resp, http.StatusSeeOther)
	if now := session(); now == "" || now == old {
		t.Fatalf("after the change the session cookie is missing or unchanged (missing: %v); want a new one", now == "")
	}
	b.follow(resp)
	b.wantText("Password saved.")
	if b.csrf() == oldCSRF {
		t.Error("the new session kept the old form token")
	}
	copied := newBrowser(t, n)
	copied.c.Jar.SetCookies(u, []*http.Cookie{{Name: "sombus_session", Value: old, Path: "/portal/"}})
	if resp := copied.do("GET", "/portal/", nil); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/portal/signin") {
		t.Fatalf("a copy of the old session's cookie: %d to %q, want a redirect to sign in", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := b.do("GET", "/portal/", nil); resp.StatusCode != 200 {
		t.Fatalf("the new session: %d, want 200", resp.StatusCode)
	}
}

// TestPortalFormsFollowTheRoles: the create-connection form is shown to
// those the service lets create one (admins and owners), not to
// developers, who are told who can; the forms' own limits are the
// service's; the roles' help says what each role may do.
func TestPortalFormsFollowTheRoles(t *testing.T) {
	n, b, ws := signedInOperator(t)
	for _, who := range []struct{ name, role string }{{"dev", "developer"}, {"adm", "admin"}} {
		id := addMember(t, n, ws, who.name, who.name+"@example.com", who.role)
		setPassword(t, n, id, who.name+" password 1234")
		c := newBrowser(t, n)
		c.wantStatus("sign in", c.signIn(who.name+"@example.com", who.name+" password 1234"), http.StatusSeeOther)
		c.wantStatus("consumers", c.do("GET", "/portal/workspaces/"+ws+"/consumers", nil), 200)
		form := strings.Contains(c.last, `id="create-connection"`)
		if who.role == "developer" && (form || !strings.Contains(c.last, "An admin of this workspace can create one.")) {
			t.Errorf("a developer is shown the create form (%v), or not told who can create one:\n%s", form, c.last)
		}
		if who.role == "admin" && !form {
			t.Errorf("an admin is not shown the create form:\n%s", c.last)
		}
	}
	b.wantStatus("consumers", b.do("GET", "/portal/workspaces/"+ws+"/consumers", nil), 200)
	for _, want := range []string{fmt.Sprintf(`maxlength="%d"`, bus.MaxNameLength), fmt.Sprintf(`max="%d"`, bus.MaxAttemptLimit)} {
		if !strings.Contains(b.last, want) {
			t.Errorf("the create form lacks %s", want)
		}
	}
	b.wantStatus("workspace", b.do("GET", "/portal/workspaces/"+ws, nil), 200)
	b.wantText("also gets, rotates and revokes connections' secrets and redrives dead letters",
		"also creates, changes, revokes and removes connections, purges queues and reads the audit log")
}

// TestPortalEchoesOnlyText: what a refused form or a filter shows back of
// the request is UTF-8 text: invalid bytes and NUL come back as U+FFFD.
func TestPortalEchoesOnlyText(t *testing.T) {
	n, b, ws := signedInOperator(t)
	bad := "a\xff\xfe\x00b"
	check := func(what string) {
		t.Helper()
		if !utf8.ValidString(b.last) || strings.Contains(b.last, "\x00") {
			t.Errorf("%s: the page holds bytes that are not UTF-8 text", what)
		}
		if !strings.Contains(b.last, "a\uFFFD") {
			t.Errorf("%s: the value is not shown back with U+FFFD:\n%.3000s", what, b.last)
		}
	}
	b.do("GET", "/portal/workspaces/"+ws+"/consumers", nil)
	b.wantStatus("a connection named with bad bytes", b.post("/portal/workspaces/"+ws+"/connections", url.Values{"name": {bad}, "kind": {"consumer"}}), 400)
	check("create connection")
	b.wantStatus("the audit log from a bad date", b.do("GET", "/portal/workspaces/"+ws+"/audit?from="+url.QueryEscape(bad), nil), 400)
	check("audit filter")
	c := newBrowser(t, n)
	c.do("GET", "/portal/signin", nil)
	c.wantStatus("sign in with a bad email", c.do("POST", "/portal/signin", url.Values{"csrf": {c.csrf()}, "email": {bad + "@example.com"}, "password": {"whatever it is"}}), 401)
	b = c
	check("sign-in")
}

// TestPortalRefusalsEscapeBidiControls: a portal page quoting an id of the
// address that holds a bidirectional override shows it escaped, as the
// API's refusals do, never the character itself.
func TestPortalRefusalsEscapeBidiControls(t *testing.T) {
	n := startNode(t)
	b := newBrowser(t, n)
	b.signIn("operator@localhost", operatorPassword)
	ws := n.Workspace("Escapes")
	for _, path := range []string{"/portal/workspaces/%E2%80%AE", "/portal/workspaces/" + ws + "/connections/c%E2%80%AEfdp.exe"} {
		b.wantStatus(path, b.do("GET", path, nil), 404)
		if strings.ContainsRune(b.last, '\u202e') || !strings.Contains(b.last, `\u202e`) {
			t.Errorf("GET %s: the page does not show U+202E escaped:\n%.2000s", path, b.last)
		}
	}
}

// TestPortalTrimsWorkspaceName: white space around a new workspace's
// name, as typed into the form, is not kept (as for the other forms).
func TestPortalTrimsWorkspaceName(t *testing.T) {
	n, b, _ := signedInOperator(t)
	b.do("GET", "/portal/", nil)
	b.wantStatus("create", b.post("/portal/workspaces", url.Values{"name": {"  Trimmed name \t"}}), http.StatusSeeOther)
	r := n.Do("GET", "/v1/manage/workspaces", servertest.BootstrapKey, nil)
	if !strings.Contains(string(r.Body), `"name":"Trimmed name"`) {
		t.Fatalf("the workspace's name was not trimmed: %s", r.Body)
	}
}

// addMember creates a user and gives them role in workspace ws, through
// the API as the operator, and returns the user's id.
func addMember(t *testing.T, n *servertest.Node, ws, name, email, role string) string {
	t.Helper()
	r := n.Do("POST", "/v1/manage/users", servertest.BootstrapKey, map[string]any{"name": name, "email": email})
	if r.Status != 201 {
		t.Fatalf("create user: %d %s", r.Status, r.Body)
	}
	var u struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(r.Body, &u); err != nil {
		t.Fatal(err)
	}
	n.Do("PUT", "/v1/manage/workspaces/"+ws+"/members/"+u.ID, servertest.BootstrapKey, map[string]any{"role": role}).Must(t, 200)
	return u.ID
}
