package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/sombus/sombus/internal/bus"
)

// HandleKeyName is the name of the server secret that keys receipt-handle
// MACs (tx.ServerSecret), so that every node accepts every node's handles.
const HandleKeyName = "handle_mac"

// Receipt handle layout, before base64url:
//
//	version (1) | len(queue id) (uvarint) | queue id | story id (8) | seq (8) | nonce (8) | MAC (16)
//
// The MAC is HMAC-SHA256 over everything before it, truncated to 128 bits
// (plenty against forgery: an attacker gets one online guess per request).
const (
	handleVersion    = 1
	handleMACSize    = 16
	maxHandleText    = 512 // longer inputs are refused before decoding
	maxHandleQueueID = 128
	minHandleKeySize = 16
)

// ErrInvalidHandle is returned (wrapped, with the reason) by Decode for any
// receipt handle that was not made by Encode with this key. Callers answer it
// with bus.CodeReceiptHandleIsInvalid.
var ErrInvalidHandle = errors.New("receipt handle is invalid")

// HandleCodec turns a bus.Handle into the opaque, URL-safe receipt handle
// given to consumers and back, refusing anything forged or altered. Safe for
// concurrent use.
type HandleCodec struct {
	key     []byte
	scratch sync.Pool // of *handleScratch
}

var _ bus.HandleCodec = (*HandleCodec)(nil)

// NewHandleCodec returns a codec keyed with key (at least 16 bytes; the
// server uses 32 from LoadHandleKey).
func NewHandleCodec(key []byte) (*HandleCodec, error) {
	if len(key) < minHandleKeySize {
		return nil, fmt.Errorf("auth: handle key must have at least %d bytes", minHandleKeySize)
	}
	c := &HandleCodec{key: append([]byte(nil), key...)}
	c.scratch.New = func() any { return &handleScratch{mac: hmac.New(sha256.New, c.key)} }
	return c, nil
}

// LoadHandleKey returns the handle MAC key shared by all nodes: the server
// secret "handle_mac", created with 32 random bytes by the first node.
func LoadHandleKey(ctx context.Context, store bus.Store) ([]byte, error) {
	key, err := bus.LoadServerSecret(ctx, store, HandleKeyName)
	if err != nil {
		return nil, fmt.Errorf("auth: handle key: %w", err)
	}
	return key, nil
}

// Encode returns the receipt handle of h.
func (c *HandleCodec) Encode(h bus.Handle) string {
	return string(c.AppendEncode(nil, h))
}

// AppendEncode appends the receipt handle of h to dst.
func (c *HandleCodec) AppendEncode(dst []byte, h bus.Handle) []byte {
	sc := c.scratch.Get().(*handleScratch)
	defer c.scratch.Put(sc)
	buf := sc.raw[:0]
	buf = append(buf, handleVersion)
	buf = binary.AppendUvarint(buf, uint64(len(h.QueueID)))
	buf = append(buf, h.QueueID...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(h.StoryID))
	buf = binary.BigEndian.AppendUint64(buf, uint64(h.Seq))
	buf = binary.BigEndian.AppendUint64(buf, uint64(h.Nonce))
	buf = append(buf, sc.sum(buf)...)
	return base64.RawURLEncoding.AppendEncode(dst, buf)
}

// Decode returns the handle inside s, or an error wrapping ErrInvalidHandle
// when s is malformed, of another version, or its MAC does not match.
func (c *HandleCodec) Decode(s string) (bus.Handle, error) {
	return c.decode(s, "", false)
}

// DecodeFor is Decode of a handle that must be of queue queueID: one of
// another queue is refused as invalid. The handle's QueueID is queueID
// itself, not a copy.
func (c *HandleCodec) DecodeFor(s, queueID string) (bus.Handle, error) {
	return c.decode(s, queueID, true)
}

func (c *HandleCodec) decode(s, queueID string, forQueue bool) (bus.Handle, error) {
	if s == "" || len(s) > maxHandleText {
		return bus.Handle{}, fmt.Errorf("%w: wrong length", ErrInvalidHandle)
	}
	// Only the base64url alphabet, decoded strictly: the decoder otherwise
	// skips "\r" and "\n" and ignores the spare low bits of the last
	// character, either of which makes several texts of one handle.
	if !isBase64URL(s) {
		return bus.Handle{}, fmt.Errorf("%w: not base64url", ErrInvalidHandle)
	}
	sc := c.scratch.Get().(*handleScratch)
	defer c.scratch.Put(sc)
	text := sc.text[:copy(sc.text[:], s)]
	size, err := strictBase64URL.Decode(sc.raw[:], text)
	if err != nil {
		return bus.Handle{}, fmt.Errorf("%w: not base64url", ErrInvalidHandle)
	}
	raw := sc.raw[:size]
	if len(raw) < 1+1+24+handleMACSize {
		return bus.Handle{}, fmt.Errorf("%w: too short", ErrInvalidHandle)
	}
	if raw[0] != handleVersion {
		return bus.Handle{}, fmt.Errorf("%w: unknown version", ErrInvalidHandle)
	}
	body, sum := raw[:len(raw)-handleMACSize], raw[len(raw)-handleMACSize:]
	// hmac.Equal takes the same time wherever the MACs differ, so an
	// attacker cannot find a valid MAC byte by byte from response times.
	if !hmac.Equal(sc.sum(body), sum) {
		return bus.Handle{}, fmt.Errorf("%w: bad MAC", ErrInvalidHandle)
	}
	// The MAC holds, so body is what Encode wrote; still parse defensively.
	n, k := binary.Uvarint(body[1:])
	if k <= 0 || n > maxHandleQueueID || uint64(len(body)-1-k) != n+24 {
		return bus.Handle{}, fmt.Errorf("%w: malformed", ErrInvalidHandle)
	}
	p := body[1+k:]
	var h bus.Handle
	switch {
	case !forQueue:
		h.QueueID = string(p[:n])
	case string(p[:n]) == queueID:
		h.QueueID = queueID
	default:
		return bus.Handle{}, fmt.Errorf("%w: of another queue", ErrInvalidHandle)
	}
	p = p[n:]
	h.StoryID = int64(binary.BigEndian.Uint64(p[0:8]))
	h.Seq = int64(binary.BigEndian.Uint64(p[8:16]))
	h.Nonce = int64(binary.BigEndian.Uint64(p[16:24]))
	return h, nil
}

// strictBase64URL decodes unpadded base64url, refusing spare low bits.
var strictBase64URL = base64.RawURLEncoding.Strict()

// handleScratch is a keyed HMAC-SHA256 state with room for one handle,
// reused: a fresh HMAC costs several allocations, and every message
// received and acknowledged needs one.
type handleScratch struct {
	mac hash.Hash
	// raw holds a handle's bytes (a decoded text of up to maxHandleText
	// characters is shorter), text a copy of its text.
	raw  [maxHandleText]byte
	text [maxHandleText]byte
	out  [sha256.Size]byte
}

// sum returns the truncated HMAC-SHA256 of b (valid until sc is reused).
func (sc *handleScratch) sum(b []byte) []byte {
	sc.mac.Reset()
	sc.mac.Write(b)
	return sc.mac.Sum(sc.out[:0])[:handleMACSize]
}

// isBase64URL reports whether s holds only characters of the unpadded
// base64url alphabet.
func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
