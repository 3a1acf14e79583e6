package auth

import (
	"strings"
	"testing"
)

func TestPasswordHash(t *testing.T) {
	h := HashPassword("correct horse battery staple")
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not an argon2id PHC string with the default parameters", h)
	}
	if h2 := HashPassword("correct horse battery staple"); h2 == h {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	if !PasswordMatches("correct horse battery staple", h) {
		t.Fatal("the password does not match its own hash")
	}
	for _, wrong := range []string{"", "correct horse battery stapl", "Correct horse battery staple"} {
		if PasswordMatches(wrong, h) {
			t.Fatalf("a wrong password (%d bytes) matches", len(wrong))
		}
	}
}

func TestPasswordMatchesRefusesMalformedHashes(t *testing.T) {
	good := HashPassword("correct horse battery staple")
	parts := strings.Split(good, "$")
	for name, phc := range map[string]string{
		"empty":        "",
		"bcrypt":       "$2a$10$abcdefghijklmnopqrstuu",
		"argon2i":      strings.Replace(good, "argon2id", "argon2i", 1),
		"old version":  strings.Replace(good, "v=19", "v=16", 1),
		"huge memory":  "$argon2id$v=19$m=4294967295,t=2,p=1$" + parts[4] + "$" + parts[5],
		"many passes":  "$argon2id$v=19$m=19456,t=1000,p=1$" + parts[4] + "$" + parts[5],
		"bad salt":     "$argon2id$v=19$m=19456,t=2,p=1$!!$" + parts[5],
		"short hash":   "$argon2id$v=19$m=19456,t=2,p=1$" + parts[4] + "$AAAA",
		"extra fields": good + "$x",
	} {
		if PasswordMatches("correct horse battery staple", phc) {
			t.Errorf("%s: a malformed hash matches", name)
		}
	}
}

func TestCheapPasswordHashesStillVerify(t *testing.T) {
	full := HashPassword("correct horse battery staple")
	defer func(m, tm uint32) { argonMemoryKiB, argonTime = m, tm }(argonMemoryKiB, argonTime)
	UseCheapPasswordHashes()
	cheap := HashPassword("correct horse battery staple")
	if !strings.HasPrefix(cheap, "$argon2id$v=19$m=1024,t=1,p=1$") {
		t.Fatalf("cheap hash %q", cheap)
	}
	for _, h := range []string{full, cheap} {
		if !PasswordMatches("correct horse battery staple", h) || PasswordMatches("wrong", h) {
			t.Errorf("hash %s does not verify by its own parameters", h[:30])
		}
	}
}
