package bus

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// Cursors of the listings that page by position (connections, dead
// letters). A position is not an item's id, as the audit log's cursors are:
// it stays valid when the item it follows is removed, so the store cannot
// tell by looking it up whether it belongs to the listing. Instead the
// cursor is sealed: a MAC, keyed with a server secret, over the position
// and the listing it was made for (its workspace, its connection, its kind
// filter). A cursor is accepted only by that listing; one of another
// workspace, connection or kind, or made up or altered, is refused as a
// cursor the listing did not return.
//
// Layout, before base64url (no padding):
//
//	listing (1) | position (varints) | MAC (16)
//
// The MAC is HMAC-SHA256 over the listing byte, the listing's scope (each
// part length-prefixed) and the position, truncated to 128 bits.

// CursorKeyName is the name of the server secret that keys cursor MACs
// (tx.ServerSecret), so that every node accepts every node's cursors.
const CursorKeyName = "cursor_mac"

const (
	cursorMACSize    = 16
	minCursorKeySize = 16
	maxCursorText    = 96 // longer inputs are refused before decoding

	cursorConnections byte = 'c' // position: created_at ms (varint), seq (uvarint)
	cursorDeadLetters byte = 'd' // position: dead letter id (uvarint)
)

// errBadCursor refuses a cursor the listing did not return.
var errBadCursor = Errorf(RuleManageBadRequest, "cursor is not a cursor this listing returned.")

// cursorStrict is the decoder of cursors: only the base64url alphabet, and
// no spare low bits in the last character, so one cursor has one text.
var cursorStrict = base64.RawURLEncoding.Strict()

// LoadCursorKey returns the cursor MAC key shared by all nodes: the server
// secret "cursor_mac", created with 32 random bytes by the first node.
func LoadCursorKey(ctx context.Context, store Store) ([]byte, error) {
	key, err := LoadServerSecret(ctx, store, CursorKeyName)
	if err != nil {
		return nil, fmt.Errorf("cursor key: %w", err)
	}
	return key, nil
}

// LoadServerSecret returns the server secret name that every node of the
// store shares, made of 32 random bytes by the first node that asks.
func LoadServerSecret(ctx context.Context, store Store, name string) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	var key []byte
	err := store.Update(ctx, func(tx Tx) error {
		var err error
		key, err = tx.ServerSecret(name, fresh)
		return err
	})
	return key, err
}

// cursorKeyOf returns key when it is long enough, or else a random key of
// this process (a Service of one node, as tests make).
func cursorKeyOf(key []byte) []byte {
	if len(key) >= minCursorKeySize {
		return append([]byte(nil), key...)
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		panic("bus: crypto/rand failed: " + err.Error())
	}
	return fresh
}

// cursorMAC returns the truncated MAC of a cursor's body (listing byte and
// position) for the listing scope.
func (s *Service) cursorMAC(body []byte, scope []string) []byte {
	m := hmac.New(sha256.New, s.cursorKey)
	m.Write(body[:1])
	var n [binary.MaxVarintLen64]byte
	for _, p := range scope {
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		m.Write([]byte(p))
	}
	m.Write(body[1:])
	return m.Sum(nil)[:cursorMACSize]
}

// sealCursor returns the cursor of position pos (varints) in the listing
// of kind listing and scope.
func (s *Service) sealCursor(listing byte, scope []string, pos []byte) string {
	body := append([]byte{listing}, pos...)
	return base64.RawURLEncoding.EncodeToString(append(body, s.cursorMAC(body, scope)...))
}

// openCursor returns the position inside cursor when it was made by
// sealCursor for this listing and scope, or errBadCursor.
func (s *Service) openCursor(cursor string, listing byte, scope []string) ([]byte, error) {
	if len(cursor) > maxCursorText {
		return nil, errBadCursor
	}
	b, err := cursorStrict.DecodeString(cursor)
	if err != nil || len(b) < 1+cursorMACSize || b[0] != listing {
		return nil, errBadCursor
	}
	body, sum := b[:len(b)-cursorMACSize], b[len(b)-cursorMACSize:]
	if !hmac.Equal(s.cursorMAC(body, scope), sum) {
		return nil, errBadCursor
	}
	return body[1:], nil
}

// connectionCursor returns the cursor of position p in the connections
// listing of workspaceID filtered by kind ("" for every kind).
func (s *Service) connectionCursor(workspaceID string, kind ConnectionKind, p ConnectionPosition) string {
	pos := binary.AppendVarint(nil, p.CreatedAt.UnixMilli())
	pos = binary.AppendUvarint(pos, uint64(p.Seq))
	return s.sealCursor(cursorConnections, []string{workspaceID, string(kind)}, pos)
}

// connectionPosition reads a cursor of connectionCursor made for the same
// listing; "" is the first page (nil).
func (s *Service) connectionPosition(workspaceID string, kind ConnectionKind, cursor string) (*ConnectionPosition, error) {
	if cursor == "" {
		return nil, nil
	}
	pos, err := s.openCursor(cursor, cursorConnections, []string{workspaceID, string(kind)})
	if err != nil {
		return nil, err
	}
	msec, n := binary.Varint(pos)
	if n <= 0 {
		return nil, errBadCursor
	}
	seq, m := binary.Uvarint(pos[n:])
	if m <= 0 || n+m != len(pos) || seq > 1<<62 {
		return nil, errBadCursor
	}
	return &ConnectionPosition{CreatedAt: time.UnixMilli(msec).UTC(), Seq: int64(seq)}, nil
}

// deadLetterCursor returns the cursor after dead letter id in the listing
// of connection connectionID of workspaceID.
func (s *Service) deadLetterCursor(workspaceID, connectionID string, id int64) string {
	return s.sealCursor(cursorDeadLetters, []string{workspaceID, connectionID}, binary.AppendUvarint(nil, uint64(id)))
}

// deadLetterAfter reads a cursor of deadLetterCursor made for the same
// listing; "" is the first page (0).
func (s *Service) deadLetterAfter(workspaceID, connectionID, cursor string) (int64, error) {
	if cursor == "" {
		return 0, nil
	}
	pos, err := s.openCursor(cursor, cursorDeadLetters, []string{workspaceID, connectionID})
	if err != nil {
		return 0, err
	}
	id, n := binary.Uvarint(pos)
	if n <= 0 || n != len(pos) || id > 1<<62 {
		return 0, errBadCursor
	}
	return int64(id), nil
}
