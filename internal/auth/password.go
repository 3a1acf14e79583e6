package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters of new password hashes: 19 MiB of memory, two passes,
// one lane, a 16-byte salt and a 32-byte hash (the smallest of the
// configurations OWASP's password storage guidance recommends, which takes
// a few tens of milliseconds). Stored hashes carry their own parameters, so
// these can be raised without making existing passwords unusable.
var (
	argonMemoryKiB uint32 = 19 * 1024
	argonTime      uint32 = 2
)

const (
	argonThreads = 1
	argonSaltLen = 16
	argonKeyLen  = 32
)

// UseCheapPasswordHashes makes new password hashes cost 1 MiB and one pass
// instead of 19 MiB and two, for test binaries that hash many passwords
// (under the race detector a full hash takes over a second). Call it
// before any test runs (in TestMain); never in a server. Hashes made
// before or after verify alike: each carries its own parameters.
func UseCheapPasswordHashes() {
	argonMemoryKiB, argonTime = 1024, 1
}

// Bounds on the parameters a stored hash may ask for: a corrupt or hostile
// row must not make a sign-in allocate gigabytes or run for minutes.
const (
	maxArgonMemoryKiB = 1 << 20 // 1 GiB
	maxArgonTime      = 16
	maxArgonThreads   = 16
)

// HashPassword returns the Argon2id hash of password with a fresh random
// salt, in PHC string form:
//
//	$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>
//
// with salt and hash in unpadded standard base64.
func HashPassword(password string) string {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		panic("auth: crypto/rand failed: " + err.Error())
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// dummyPasswordHash is checked against when a user is unknown or has no
// password, so that such a sign-in costs the same work as a wrong password.
// It is made on first use, with the parameters of new hashes then.
var dummyPasswordHash = sync.OnceValue(func() string { return HashPassword("sombus-no-such-password") })

// PasswordMatches reports whether password hashes to phc (a string
// HashPassword returned). An empty or malformed phc never matches, after
// the same work as a real check.
func PasswordMatches(password, phc string) bool {
	p, err := parsePHC(phc)
	if err != nil {
		p, _ = parsePHC(dummyPasswordHash())
		argon2.IDKey([]byte(password), p.salt, p.time, p.memory, p.threads, uint32(len(p.key)))
		return false
	}
	got := argon2.IDKey([]byte(password), p.salt, p.time, p.memory, p.threads, uint32(len(p.key)))
	return subtle.ConstantTimeCompare(got, p.key) == 1
}

type phcParams struct {
	memory, time uint32
	threads      uint8
	salt, key    []byte
}

// parsePHC reads an Argon2id PHC string within the bounds above.
func parsePHC(s string) (phcParams, error) {
	var p phcParams
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, errors.New("not an argon2id PHC string")
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return p, errors.New("unsupported argon2 version")
	}
	var m, t, th uint32
	if n, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &th); err != nil || n != 3 {
		return p, errors.New("bad argon2 parameters")
	}
	if m < 8 || m > maxArgonMemoryKiB || t < 1 || t > maxArgonTime || th < 1 || th > maxArgonThreads || m < 8*th {
		return p, errors.New("argon2 parameters out of bounds")
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil || len(salt) < 8 || len(salt) > 64 {
		return p, errors.New("bad salt")
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(key) < 16 || len(key) > 64 {
		return p, errors.New("bad hash")
	}
	p.memory, p.time, p.threads, p.salt, p.key = m, t, uint8(th), salt, key
	return p, nil
}

// HashPassword is the package's HashPassword.
func (Credentials) HashPassword(password string) string { return HashPassword(password) }

// PasswordMatches is the package's PasswordMatches.
func (Credentials) PasswordMatches(password, phc string) bool { return PasswordMatches(password, phc) }
