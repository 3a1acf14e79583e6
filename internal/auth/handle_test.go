package auth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math"
	"testing"

	"github.com/sombus/sombus/internal/bus"
)

func newCodecT(t *testing.T, key []byte) *HandleCodec {
	t.Helper()
	c, err := NewHandleCodec(key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHandleRoundTrip(t *testing.T) {
	c := newCodecT(t, bytes.Repeat([]byte{7}, 32))
	for _, h := range []bus.Handle{
		{QueueID: bus.NewID(bus.PrefixConnection), StoryID: 1, Seq: 1, Nonce: 1},
		{QueueID: bus.NewID(bus.PrefixConnection), StoryID: math.MaxInt64, Seq: 42, Nonce: math.MaxInt64},
		{QueueID: "c", StoryID: 0, Seq: 0, Nonce: 0},
	} {
		s := c.Encode(h)
		for _, r := range s {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				t.Fatalf("%q is not URL-safe", s)
			}
		}
		got, err := c.Decode(s)
		if err != nil || got != h {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", h, got, err)
		}
		if got, err := c.DecodeFor(s, h.QueueID); err != nil || got != h {
			t.Fatalf("DecodeFor(Encode(%+v), its queue) = %+v, %v", h, got, err)
		}
		if got, err := c.DecodeFor(s, h.QueueID+"x"); !errors.Is(err, ErrInvalidHandle) {
			t.Fatalf("DecodeFor(Encode(%+v), another queue) = %+v, %v", h, got, err)
		}
		if b := string(c.AppendEncode([]byte("prefix"), h)); b != "prefix"+s {
			t.Fatalf("AppendEncode(prefix, %+v) = %q, want prefix%s", h, b, s)
		}
	}
}

func TestHandleRefusesForgeries(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	c := newCodecT(t, key)
	h := bus.Handle{QueueID: bus.NewID(bus.PrefixConnection), StoryID: 10, Seq: 3, Nonce: 123456789}
	good := c.Encode(h)
	raw, _ := base64.RawURLEncoding.DecodeString(good)

	bad := map[string]string{
		"empty":     "",
		"not b64":   "***",
		"truncated": good[:len(good)-4],
		"short":     good[:10],
		"too long":  good + string(bytes.Repeat([]byte("A"), 600)),
		"padded":    good + "==",
	}
	// Every single flipped bit is caught.
	for i := range raw {
		for bit := 0; bit < 8; bit++ {
			f := append([]byte(nil), raw...)
			f[i] ^= 1 << bit
			if _, err := c.Decode(base64.RawURLEncoding.EncodeToString(f)); !errors.Is(err, ErrInvalidHandle) {
				t.Fatalf("flipped bit %d of byte %d accepted: %v", bit, i, err)
			}
		}
	}
	// Another queue's handle MAC'd with another key.
	other := newCodecT(t, bytes.Repeat([]byte{8}, 32))
	bad["other key"] = other.Encode(bus.Handle{QueueID: bus.NewID(bus.PrefixConnection), StoryID: 10, Seq: 3, Nonce: 1})
	bad["same handle other key"] = other.Encode(h)
	// The queue id swapped for another one, keeping the MAC.
	h2 := h
	h2.QueueID = bus.NewID(bus.PrefixConnection)
	swapped, _ := base64.RawURLEncoding.DecodeString(c.Encode(h2))
	copy(swapped[len(swapped)-handleMACSize:], raw[len(raw)-handleMACSize:])
	bad["queue swapped"] = base64.RawURLEncoding.EncodeToString(swapped)
	// A correctly MAC'd handle of an unknown version.
	v2 := append([]byte(nil), raw[:len(raw)-handleMACSize]...)
	v2[0] = 2
	m := hmac.New(sha256.New, key)
	m.Write(v2)
	bad["version 2"] = base64.RawURLEncoding.EncodeToString(append(v2, m.Sum(nil)[:handleMACSize]...))
	// A correctly MAC'd body of the wrong shape.
	body := []byte{handleVersion, 200}
	body = append(body, bytes.Repeat([]byte{1}, 30)...)
	m = hmac.New(sha256.New, key)
	m.Write(body)
	bad["bad length field"] = base64.RawURLEncoding.EncodeToString(append(body, m.Sum(nil)[:handleMACSize]...))

	for name, s := range bad {
		if got, err := c.Decode(s); !errors.Is(err, ErrInvalidHandle) {
			t.Errorf("%s: Decode = %+v, %v; want ErrInvalidHandle", name, got, err)
		}
	}
}

func TestHandleKeyShared(t *testing.T) {
	if _, err := NewHandleCodec([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
	store := newFakeStore()
	k1, err := LoadHandleKey(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := LoadHandleKey(context.Background(), store) // another node
	if len(k1) != 32 || !bytes.Equal(k1, k2) {
		t.Fatalf("nodes got different keys")
	}
	h := bus.Handle{QueueID: "cq", StoryID: 1, Seq: 2, Nonce: 3}
	if got, err := newCodecT(t, k2).Decode(newCodecT(t, k1).Encode(h)); err != nil || got != h {
		t.Fatalf("cross-node decode: %+v, %v", got, err)
	}
}
