// Package portaltest drives the portal in a real browser (headless
// Chromium through chromedp) against a real node, for the portal's tests.
//
// A test package that uses it starts one browser for all its tests and
// gives each test its own tab in its own browser context (cookies are not
// shared between tests, which run nodes on different ports of one host):
//
//	func TestMain(m *testing.M) { portaltest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		e := portaltest.Start(t)
//		e.SignIn(portaltest.OperatorEmail, portaltest.OperatorPassword)
//		e.Go("/portal/")
//		...
//	}
//
// The browser is found as chromium, chromium-browser or google-chrome in
// PATH, or at $CHROME_PATH. Without one the tests skip, unless CI=true,
// where they fail: CI installs Debian's chromium package.
//
// With SOMBUS_SCREENSHOTS set to a directory, Screenshot writes PNGs of the
// current page at laptop and phone widths there.
package portaltest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sombus/sombus/internal/auth"
	"github.com/sombus/sombus/internal/bus"
	"github.com/sombus/sombus/internal/server/servertest"
)

// The bootstrap operator of every test node signs in with these.
const (
	OperatorEmail    = "operator@localhost"
	OperatorPassword = "operator-portal-password"
)

// stepTimeout bounds one browser step (a navigation, a click and the page
// it loads).
const stepTimeout = 45 * time.Second

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	cancelBrowser context.CancelFunc
	browserErr    error
	chromePath    string
)

// ChromePath finds the browser: $CHROME_PATH, else chromium,
// chromium-browser or google-chrome in PATH ("" when none).
func ChromePath() string {
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Main runs a package's tests and then stops the shared browser. New
// password hashes are cheap in these tests (auth.UseCheapPasswordHashes).
func Main(m *testing.M) {
	auth.UseCheapPasswordHashes()
	code := m.Run()
	if cancelBrowser != nil {
		cancelBrowser()
	}
	os.Exit(code)
}

// browser starts the shared browser once.
func browser(t testing.TB) context.Context {
	t.Helper()
	browserOnce.Do(func() {
		chromePath = ChromePath()
		if chromePath == "" {
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromePath),
			chromedp.NoSandbox, // tests run as root in CI
			chromedp.DisableGPU,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.WindowSize(1280, 800),
		)
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(alloc)
		browserCtx = ctx
		cancelBrowser = func() { cancelCtx(); cancelAlloc() }
		browserErr = chromedp.Do(ctx) // starts the browser
	})
	if chromePath == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no browser for the portal's browser tests: install Debian's chromium package (or set CHROME_PATH)")
		}
		t.Skip("no browser (chromium, chromium-browser or google-chrome in PATH, or CHROME_PATH): skipping the portal's browser tests")
	}
	if browserErr != nil {
		t.Fatalf("start %s: %v", chromePath, browserErr)
	}
	return browserCtx
}

// Env is one test's node and browser tab.
type Env struct {
	T    *testing.T
	Node *servertest.Node
	// Tab is the test's tab, in a browser context of its own.
	Tab context.Context
	// OperatorID is the bootstrap operator's user id.
	OperatorID string
}

// Start starts a node (SQLite, manual clock) whose operator has
// OperatorPassword, and opens a tab for the test.
func Start(t *testing.T) *Env {
	t.Helper()
	b := browser(t)
	n := servertest.Start(t, servertest.Options{})
	tab, cancel := chromedp.NewContext(b, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	e := &Env{T: t, Node: n, Tab: tab}
	e.OperatorID = e.whoami(servertest.BootstrapKey)
	e.SetPassword(servertest.BootstrapKey, e.OperatorID, OperatorPassword)
	return e
}

// Do runs browser steps, failing the test on an error.
func (e *Env) Do(steps ...chromedp.Action[chromedp.Void]) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(e.Tab, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		e.T.Fatalf("browser at %s: %v\npage text:\n%s", e.pathNoFail(), err, e.bodyNoFail())
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its value.
func Eval[T any](e *Env, expr string) T {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(e.Tab, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		e.T.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// Go opens path (under the node's URL) and waits for it to load.
func (e *Env) Go(path string) {
	e.T.Helper()
	e.Do(chromedp.Navigate(e.Node.URL + path))
}

// ClickAndWait clicks the element sel (a CSS selector) and waits for the
// page it leads to to load.
func (e *Env) ClickAndWait(sel string) {
	e.T.Helper()
	e.Do(
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.documentElement.dataset.stale = "1", true`)(ctx, t)
			return err
		}),
		chromedp.Click(chromedp.CSS(sel)),
		e.waitNewPage(),
	)
}

// SubmitAndWait submits the form sel and waits for the page it leads to.
func (e *Env) SubmitAndWait(sel string) {
	e.T.Helper()
	e.Do(
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.documentElement.dataset.stale = "1", true`)(ctx, t)
			return err
		}),
		chromedp.Submit(chromedp.CSS(sel)),
		e.waitNewPage(),
	)
}

// waitNewPage waits until a new document (one without the stale mark) has
// loaded. Evaluations fail while the page is being replaced; it asks again.
func (e *Env) waitNewPage() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		const expr = `document.readyState === "complete" && document.documentElement.dataset.stale !== "1"`
		for {
			done, err := chromedp.Evaluate[bool](expr)(ctx, t)
			if err == nil && done {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("wait for the next page: %w (last error: %w)", ctx.Err(), err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}

// Fill sets the value of the input, select or textarea sel, as typing or
// choosing would (input and change events fire).
func (e *Env) Fill(sel, value string) {
	e.T.Helper()
	ok := Eval[bool](e, fmt.Sprintf(`(() => {
		const el = document.querySelector(%s);
		if (!el) return false;
		el.focus();
		el.value = %s;
		el.dispatchEvent(new Event("input", {bubbles: true}));
		el.dispatchEvent(new Event("change", {bubbles: true}));
		return true;
	})()`, jsString(sel), jsString(value)))
	if !ok {
		e.T.Fatalf("no %s on %s", sel, e.URL())
	}
}

// Select picks the option value of the select sel.
func (e *Env) Select(sel, value string) {
	e.T.Helper()
	e.Fill(sel, value)
}

// SignIn signs in through the sign-in form and waits for the next page.
func (e *Env) SignIn(email, password string) {
	e.T.Helper()
	if !strings.HasSuffix(e.Path(), "/portal/signin") {
		e.Go("/portal/signin")
	}
	e.Fill("#email", email)
	e.Fill("#password", password)
	e.ClickAndWait("#signin")
}

// SignOut presses Sign out.
func (e *Env) SignOut() {
	e.T.Helper()
	e.ClickAndWait("#signout")
}

// Path is the path of the current page.
func (e *Env) Path() string {
	e.T.Helper()
	return Eval[string](e, `location.pathname`)
}

// URL is the current page's path and query.
func (e *Env) URL() string {
	e.T.Helper()
	return Eval[string](e, `location.pathname + location.search`)
}

// Body is the text of the current page.
func (e *Env) Body() string {
	e.T.Helper()
	return Eval[string](e, `document.body ? document.body.innerText : ""`)
}

// Has reports whether the page has an element matching sel.
func (e *Env) Has(sel string) bool {
	e.T.Helper()
	return Eval[bool](e, fmt.Sprintf(`document.querySelector(%s) !== null`, jsString(sel)))
}

// Count is how many elements match sel.
func (e *Env) Count(sel string) int {
	e.T.Helper()
	return Eval[int](e, fmt.Sprintf(`document.querySelectorAll(%s).length`, jsString(sel)))
}

// Text is the text of the first element matching sel ("" when none).
func (e *Env) Text(sel string) string {
	e.T.Helper()
	return Eval[string](e, fmt.Sprintf(`(document.querySelector(%s) || {innerText: ""}).innerText`, jsString(sel)))
}

// Title is the page's title.
func (e *Env) Title() string {
	e.T.Helper()
	return Eval[string](e, `document.title`)
}

// WantText fails the test unless the page's text holds every one of want.
func (e *Env) WantText(want ...string) {
	e.T.Helper()
	body := e.Body()
	for _, w := range want {
		if !strings.Contains(body, w) {
			e.T.Fatalf("page %s lacks %q; its text:\n%s", e.URL(), w, body)
		}
	}
}

// CSRF is the CSRF token of the page's forms.
func (e *Env) CSRF() string {
	e.T.Helper()
	return Eval[string](e, `(document.querySelector('input[name="csrf"]') || {value: ""}).value`)
}

// ForceForm adds a form that posts fields to path to the page, as a person
// editing the page in the browser's tools could, and submits it. It is how
// tests press buttons the page does not show.
func (e *Env) ForceForm(path string, fields map[string]string) {
	e.T.Helper()
	b, _ := json.Marshal(fields)
	e.Do(
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
				document.documentElement.dataset.stale = "1";
				const f = document.createElement("form");
				f.method = "post"; f.action = %s; f.id = "forced";
				for (const [k, v] of Object.entries(%s)) {
					const i = document.createElement("input");
					i.type = "hidden"; i.name = k; i.value = v; f.appendChild(i);
				}
				document.body.appendChild(f);
				return true;
			})()`, jsString(path), b))(ctx, t)
			return err
		}),
		chromedp.Submit(chromedp.CSS("#forced")),
		e.waitNewPage(),
	)
}

// Screenshot writes PNGs of the current page at a laptop's and a phone's
// width to $SOMBUS_SCREENSHOTS (nothing when it is unset).
func (e *Env) Screenshot(name string) {
	e.T.Helper()
	dir := os.Getenv("SOMBUS_SCREENSHOTS")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // screenshots are for people to look at
		e.T.Fatal(err)
	}
	for _, size := range []struct {
		label         string
		width, height int64
		mobile        bool
	}{{"laptop", 1280, 800, false}, {"phone", 390, 844, true}} {
		var png []byte
		e.Do(
			chromedp.EmulateViewport(size.width, size.height, chromedp.EmulateScale(1)),
			chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
				var err error
				png, err = chromedp.FullScreenshot(100)(ctx, t)
				return err
			}),
		)
		if err := os.WriteFile(filepath.Join(dir, name+"-"+size.label+".png"), png, 0o644); err != nil { //nolint:gosec // screenshots are for people to look at
			e.T.Fatal(err)
		}
	}
	e.Do(chromedp.EmulateViewport(1280, 800, chromedp.EmulateScale(1)))
}

// --- the API side

// User creates a user through the management API (as the operator), with
// a password when password is not "", and returns its id and API key.
func (e *Env) User(name, email string, operator bool, password string) (id, key string) {
	e.T.Helper()
	var u struct{ ID string }
	e.Node.Do("POST", "/v1/manage/users", servertest.BootstrapKey,
		map[string]any{"name": name, "email": email, "operator": operator}).Must(e.T, 201).Decode(e.T, &u)
	var k struct {
		Key string `json:"api_key"`
	}
	e.Node.Do("POST", "/v1/manage/users/"+u.ID+"/keys", servertest.BootstrapKey, nil).Must(e.T, 201).Decode(e.T, &k)
	if password != "" {
		e.SetPassword(servertest.BootstrapKey, u.ID, password)
	}
	return u.ID, k.Key
}

// SetPassword sets a user's password through the management API with key.
func (e *Env) SetPassword(key, userID, password string) {
	e.T.Helper()
	e.Node.Do("PUT", "/v1/manage/users/"+userID+"/password", key, map[string]any{"password": password}).Must(e.T, 204)
}

// Workspace creates a workspace as the operator and returns its id.
func (e *Env) Workspace(name string) string {
	e.T.Helper()
	return e.Node.Workspace(name)
}

// Member grants a role as the operator (the owner of the workspaces the
// operator created).
func (e *Env) Member(ws, userID string, role bus.Role) {
	e.T.Helper()
	e.Node.Do("PUT", "/v1/manage/workspaces/"+ws+"/members/"+userID, servertest.BootstrapKey,
		map[string]any{"role": string(role)}).Must(e.T, 200)
}

// Advance moves the node's clock.
func (e *Env) Advance(d time.Duration) { e.Node.ManualClock().Advance(d) }

func (e *Env) whoami(key string) string {
	e.T.Helper()
	var me struct {
		User struct{ ID string } `json:"user"`
	}
	e.Node.Do("GET", "/v1/manage/whoami", key, nil).Must(e.T, 200).Decode(e.T, &me)
	return me.User.ID
}

func (e *Env) pathNoFail() string {
	ctx, cancel := context.WithTimeout(e.Tab, 2*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname + location.search`))
	return s
}

func (e *Env) bodyNoFail() string {
	ctx, cancel := context.WithTimeout(e.Tab, 2*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	return s
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
