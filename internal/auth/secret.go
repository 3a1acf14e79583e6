// Package auth holds sombus's credentials: client secrets and API keys, the
// signed access tokens of the token service, the credential checks of the
// workspace routes, and the MAC'd receipt handles of the pull API.
//
// Everything here reads the time from an injected bus.Clock, so token expiry,
// secret overlaps, cache windows and failure limits are tested without sleeps.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"

	"github.com/sombus/sombus/internal/bus"
)

// Text prefixes of generated credentials. They make a leaked credential
// recognisable (to a person and to secret scanners) and tell the two apart.
const (
	SecretPrefix = "sbs_" // connection client secrets
	APIKeyPrefix = "sbk_" // users' management API keys
)

// secretBytes is the entropy of every generated credential: 256 bits.
const secretBytes = 32

// NewSecret returns a fresh client secret (256 random bits, "sbs_" followed
// by unpadded base64url) and the hash to store. Only the hash is kept; the
// plain text is shown to the user once.
func NewSecret() (plain string, hash []byte) { return newCredential(SecretPrefix) }

// NewAPIKey returns a fresh management API key (256 random bits, "sbk_"
// followed by unpadded base64url) and the hash to store.
func NewAPIKey() (plain string, hash []byte) { return newCredential(APIKeyPrefix) }

func newCredential(prefix string) (string, []byte) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; going on
		// with a weak secret would be far worse than stopping.
		panic("auth: crypto/rand failed: " + err.Error())
	}
	plain := prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return plain, HashSecret(plain)
}

// HashSecret returns the stored form of a secret or API key: its SHA-256.
//
// A fast hash is right here, unlike for passwords: the secrets are 256 random
// bits made by NewSecret/NewAPIKey, so there is no dictionary to try and a
// brute force of the hash is as hopeless as one of the secret itself. A slow
// KDF (bcrypt, argon2) would only cost CPU on every token request. The hash is
// also deterministic, which lets the store look an API key up by its hash.
func HashSecret(plain string) []byte {
	h := sha256.Sum256([]byte(plain))
	return h[:]
}

// SecretMatches reports whether plain hashes to hash. The comparison takes
// the same time wherever the hashes differ, so timing tells an attacker
// nothing about how close a guess was.
func SecretMatches(plain string, hash []byte) bool {
	if len(hash) != sha256.Size {
		return false // no stored secret (nil) or a corrupt one never matches
	}
	// ConstantTimeCompare looks at every byte whatever the first difference.
	return subtle.ConstantTimeCompare(HashSecret(plain), hash) == 1
}

// Credentials implements bus.Credentials with this package's functions, for
// bus.Config.Credentials.
type Credentials struct{}

var _ bus.Credentials = Credentials{}

// NewSecret is the package's NewSecret.
func (Credentials) NewSecret() (plain string, hash []byte) { return NewSecret() }

// NewAPIKey is the package's NewAPIKey.
func (Credentials) NewAPIKey() (plain string, hash []byte) { return NewAPIKey() }

// Hash is HashSecret.
func (Credentials) Hash(plain string) []byte { return HashSecret(plain) }
