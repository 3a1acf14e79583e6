package auth

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestNewSecretAndAPIKey(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		gen    func() (string, []byte)
	}{{"sbs_", NewSecret}, {"sbk_", NewAPIKey}} {
		seen := map[string]bool{}
		for i := 0; i < 100; i++ {
			plain, hash := tc.gen()
			if !strings.HasPrefix(plain, tc.prefix) {
				t.Fatalf("%q lacks prefix %q", plain, tc.prefix)
			}
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(plain, tc.prefix))
			if err != nil || len(raw) != 32 {
				t.Fatalf("%q: want 256 bits of unpadded base64url, got %d bytes, %v", plain, len(raw), err)
			}
			if seen[plain] {
				t.Fatal("repeated secret")
			}
			seen[plain] = true
			if !SecretMatches(plain, hash) {
				t.Fatal("secret does not match its own hash")
			}
			if string(hash) != string(HashSecret(plain)) {
				t.Fatal("hash is not HashSecret(plain)")
			}
		}
	}
}

func TestSecretMatches(t *testing.T) {
	plain, hash := NewSecret()
	other, _ := NewSecret()
	if SecretMatches(other, hash) {
		t.Fatal("another secret matches")
	}
	if SecretMatches(plain[:len(plain)-1], hash) || SecretMatches(plain+"x", hash) {
		t.Fatal("an altered secret matches")
	}
	if SecretMatches("", nil) || SecretMatches(plain, nil) || SecretMatches(plain, hash[:16]) {
		t.Fatal("a missing or short hash matches")
	}
}
