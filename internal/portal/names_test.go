package portal_test

import (
	"net/url"
	"testing"
)

// TestPortalNamesNeedAVisibleCharacter: a workspace or connection named in
// the portal with only invisible characters (zero-width characters, a word
// joiner, a byte order mark, a soft hyphen, direction marks) is refused
// naming the field, as the API refuses it.
func TestPortalNamesNeedAVisibleCharacter(t *testing.T) {
	_, b, ws := signedInOperator(t)
	for _, blank := range []string{"\u200b\u2060\ufeff\u00ad", "\u200e\u200f\u061c"} {
		b.do("GET", "/portal/", nil)
		b.wantStatus("a blank workspace", b.post("/portal/workspaces", url.Values{"name": {blank}}), 400)
		b.wantText("name must hold a visible character")
		b.do("GET", "/portal/workspaces/"+ws+"/consumers", nil)
		b.wantStatus("a blank connection", b.post("/portal/workspaces/"+ws+"/connections", url.Values{"name": {blank}, "kind": {"consumer"}}), 400)
		b.wantText("name must hold a visible character")
	}
}
