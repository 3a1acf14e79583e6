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

// TestPortalMemberEmailsThatLookAlike: adding a member by an email that
// reads as an existing user's (a byte order mark or a right-to-left mark
// inside) is refused naming the field, not looked up as another address.
func TestPortalMemberEmailsThatLookAlike(t *testing.T) {
	_, b, ws := signedInOperator(t)
	page := "/portal/workspaces/" + ws
	for _, email := range []string{"operator\ufeff@localhost", "oper\u200fator@localhost", "operator@local\u200bhost"} {
		b.do("GET", page, nil)
		b.wantStatus("add member "+email, b.post(page+"/members", url.Values{"email": {email}, "role": {"viewer"}}), 400)
		b.wantText("email must not hold white space, control or format characters")
	}
}
