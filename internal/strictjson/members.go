package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Members checks the member names and nulls of a JSON text against the Go
// type it is to be decoded into with encoding/json, which reads names
// regardless of case (its fold: "MESSAGE_IDS" and "meſsage_ids" are both
// message_ids) and takes null for "left out". Check (or CheckOuter down to
// where the type is read) must have accepted b first: the walk trusts its
// syntax.
//
// At every level the type reads (structs, their pointers, slices and
// arrays of them, the values of maps; map keys are data), Members refuses:
//
//   - a member whose name matches a field only ignoring case (Folded): it
//     would be read as that field;
//   - null for a struct member, array item or map value (Null), unless the
//     field is tagged `strictjson:"nullable"`; items and values of
//     json.RawMessage or interface type are data, whatever they hold;
//   - a struct member tagged `strictjson:"required"` that is left out
//     (Missing);
//   - a struct member that matches no field at all (Unknown), as a decoder
//     with DisallowUnknownFields does, but in order with the others: the
//     first of these in the text is the one refused.
//
// Values of the wrong type are left to the decoder, as are json.RawMessage,
// interfaces and types that decode themselves (json.Unmarshaler,
// encoding.TextUnmarshaler).
// Members allocates nothing unless it refuses or a member name has escapes.
// On text that is not valid JSON its answer means nothing, but it stays
// within b.
func Members(b []byte, t reflect.Type) *MemberError {
	i := SkipSpace(b, 0)
	if i == len(b) {
		return nil
	}
	w := walkers.Get().(*walker)
	w.b, w.path = b, w.path[:0]
	_, err := w.value(i, t)
	if cap(w.path) <= 1<<10 {
		w.b = nil
		clear(w.path[:cap(w.path)]) // no names or keys kept alive
		walkers.Put(w)
	}
	return err
}

// MemberKind says what Members refused.
type MemberKind int

// The kinds of Members' refusals.
const (
	Folded  MemberKind = iota + 1 // a name that differs from a field's only by case
	Null                          // null where a value is required
	Missing                       // a required member left out
	Unknown                       // a member that is no field, whatever its case
)

// MemberError is a refusal of Members.
type MemberError struct {
	Kind MemberKind
	// Path is the member as sent (Folded, Unknown), the member or item
	// holding null (Null) or the member left out (Missing), such as
	// registrations[0].values.
	Path string
	// Field is the path of the field the member was taken for (Folded).
	Field string
	// Want says what the value must be, such as "an array" ("" when the
	// type decodes itself and Members cannot say): Null only.
	Want string
	// Optional is true when the value may be left out instead (Null only:
	// a member that is not required; never an array item).
	Optional bool
}

func (e *MemberError) Error() string {
	switch e.Kind {
	case Folded:
		return fmt.Sprintf("member %q differs from %q only by case: names are exact", e.Path, e.Field)
	case Null:
		want := "must not be null"
		switch {
		case e.Want != "" && e.Optional:
			want = "must be " + e.Want + " or left out, not null"
		case e.Want != "":
			want = "must be " + e.Want + ", not null"
		case e.Optional:
			want = "must not be null (leave it out instead)"
		}
		return e.Path + " " + want
	case Missing:
		return e.Path + " is required"
	case Unknown:
		return fmt.Sprintf("unknown member %q", e.Path)
	}
	return "member refused"
}

// step is one step of the path to the value being walked: a member name
// (a field's, or a map's key) or an array index.
type step struct {
	name  string
	key   []byte // a map's key (name is "")
	index int    // -1 for a member
}

// walker walks a JSON text along a Go type; path is where it is. Walkers
// are pooled, so that path's space is reused.
type walker struct {
	b    []byte
	path []step
}

var walkers = sync.Pool{New: func() any { return &walker{path: make([]step, 0, 8)} }}

// at is the path to the walk's position and then last, built into a
// string (only for a refusal).
func (w *walker) at(last step) string {
	var b strings.Builder
	for _, s := range append(w.path[:len(w.path):len(w.path)], last) {
		switch {
		case s.index >= 0:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
			continue
		case b.Len() > 0:
			b.WriteByte('.')
		}
		if s.key != nil {
			b.WriteString(strings.ToValidUTF8(string(s.key), "\uFFFD"))
		} else {
			b.WriteString(strings.ToValidUTF8(s.name, "\uFFFD"))
		}
	}
	return b.String()
}

func member(name string) step { return step{name: name, index: -1} }

// value walks the value at i (not space) read into t; it returns the index
// just after it.
func (w *walker) value(i int, t reflect.Type) (int, *MemberError) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if i >= len(w.b) || opaqueType(t) {
		return SkipValue(w.b, i), nil
	}
	switch c := w.b[i]; {
	case c == '{' && t.Kind() == reflect.Struct:
		return w.object(i, t)
	case c == '{' && t.Kind() == reflect.Map:
		return w.mapValues(i, t.Elem())
	case c == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		return w.array(i, t.Elem())
	}
	return SkipValue(w.b, i), nil
}

// inner walks the value at i read into t, at the path's step s.
func (w *walker) inner(i int, t reflect.Type, s step) (int, *MemberError) {
	w.path = append(w.path, s)
	i, err := w.value(i, t)
	w.path = w.path[:len(w.path)-1]
	return i, err
}

// isNull says whether the value at i is null.
func (w *walker) isNull(i int) bool {
	return len(w.b)-i >= 4 && string(w.b[i:i+4]) == "null"
}

// name reads the member name at i: its text (in b when it has no
// escapes), and the index of its value.
func (w *walker) name(i int) ([]byte, int) {
	end := SkipString(w.b, i)
	if end-i < 2 { // never on valid JSON
		return nil, end
	}
	name := w.b[i+1 : end-1]
	for _, c := range name {
		if c == '\\' {
			var s string
			_ = json.Unmarshal(w.b[i:end], &s)
			name = []byte(s)
			break
		}
	}
	return name, SkipSpace(w.b, SkipSpace(w.b, end)+1)
}

// next steps over the comma after a member or item; false at the end of
// the object or array (i is then just after it).
func (w *walker) next(i int) (int, bool) {
	i = SkipSpace(w.b, i)
	if i < len(w.b) && w.b[i] == ',' {
		return SkipSpace(w.b, i+1), true
	}
	return i + 1, false
}

func (w *walker) object(i int, t reflect.Type) (int, *MemberError) {
	info := structOf(t)
	var seen uint64 // fields given, by index (the first 64)
	i = SkipSpace(w.b, i+1)
	if i >= len(w.b) || w.b[i] == '}' {
		return i + 1, w.missing(info, 0)
	}
	for more := true; more; {
		name, j := w.name(i)
		f, k := info.field(name)
		switch {
		case f != nil:
			if k < 64 {
				seen |= 1 << k
			}
			if w.isNull(j) && !f.nullable {
				return 0, &MemberError{Kind: Null, Path: w.at(member(f.name)), Want: want(f.typ), Optional: !f.required}
			}
			var err *MemberError
			if j, err = w.inner(j, f.typ, member(f.name)); err != nil {
				return 0, err
			}
		default:
			if f := info.folded(name); f != nil {
				return 0, &MemberError{Kind: Folded, Path: w.at(member(string(name))), Field: w.at(member(f.name))}
			}
			return 0, &MemberError{Kind: Unknown, Path: w.at(member(string(name)))}
		}
		i, more = w.next(j)
	}
	return i, w.missing(info, seen)
}

// missing refuses the first required field of info not in seen (of the
// first 64 fields: later ones are left to the caller).
func (w *walker) missing(info *structInfo, seen uint64) *MemberError {
	for k, f := range info.fields {
		if k < 64 && f.required && seen&(1<<k) == 0 {
			return &MemberError{Kind: Missing, Path: w.at(member(f.name))}
		}
	}
	return nil
}

func (w *walker) array(i int, elem reflect.Type) (int, *MemberError) {
	i = SkipSpace(w.b, i+1)
	if i >= len(w.b) || w.b[i] == ']' {
		return i + 1, nil
	}
	data := dataType(elem)
	for n, more := 0, true; more; n++ {
		if w.isNull(i) && !data {
			return 0, &MemberError{Kind: Null, Path: w.at(step{index: n}), Want: want(elem)}
		}
		var err *MemberError
		if i, err = w.inner(i, elem, step{index: n}); err != nil {
			return 0, err
		}
		i, more = w.next(i)
	}
	return i, nil
}

func (w *walker) mapValues(i int, elem reflect.Type) (int, *MemberError) {
	i = SkipSpace(w.b, i+1)
	if i >= len(w.b) || w.b[i] == '}' {
		return i + 1, nil
	}
	data := dataType(elem)
	for more := true; more; {
		name, j := w.name(i)
		if w.isNull(j) && !data {
			return 0, &MemberError{Kind: Null, Path: w.at(step{key: name, index: -1}), Want: want(elem)}
		}
		var err *MemberError
		if j, err = w.inner(j, elem, step{key: name, index: -1}); err != nil {
			return 0, err
		}
		i, more = w.next(j)
	}
	return i, nil
}

// dataType says whether items or values of t are data, null included:
// raw JSON (the envelopes of a batch, each checked on its own) or any
// value.
func dataType(t reflect.Type) bool {
	return t == rawMessageType || t.Kind() == reflect.Interface
}

var (
	rawMessageType      = reflect.TypeFor[json.RawMessage]()
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	structInfos         sync.Map // reflect.Type → *structInfo
)

// opaqueType says whether Members does not look into values of t: raw
// JSON, any value, or a type that decodes itself.
func opaqueType(t reflect.Type) bool {
	if dataType(t) {
		return true
	}
	pt := reflect.PointerTo(t)
	return t.Implements(unmarshalerType) || pt.Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || pt.Implements(textUnmarshalerType)
}

// want says what a value of t is in JSON ("" when t decodes itself).
func want(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if opaqueType(t) {
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return ""
}

// fieldInfo is a field as encoding/json reads it.
type fieldInfo struct {
	name     string // the JSON name
	typ      reflect.Type
	required bool
	nullable bool
}

type structInfo struct {
	fields []fieldInfo
}

func structOf(t reflect.Type) *structInfo {
	if v, ok := structInfos.Load(t); ok {
		return v.(*structInfo)
	}
	info := &structInfo{}
	collectFields(t, &info.fields, map[reflect.Type]bool{})
	v, _ := structInfos.LoadOrStore(t, info)
	return v.(*structInfo)
}

// collectFields lists the fields of t as encoding/json names them:
// exported fields by their json tag's name or their own, embedded structs
// without a name flattened into t. (Of fields of embedded structs with the
// same name, encoding/json keeps the shallowest; request types have no
// such conflicts, and the first listed wins here.)
func collectFields(t reflect.Type, out *[]fieldInfo, visiting map[reflect.Type]bool) {
	if visiting[t] {
		return
	}
	visiting[t] = true
	defer delete(visiting, t)
	for sf := range t.Fields() {
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, out, visiting)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		opts := sf.Tag.Get("strictjson")
		*out = append(*out, fieldInfo{
			name: name, typ: sf.Type,
			required: hasOption(opts, "required"), nullable: hasOption(opts, "nullable"),
		})
	}
}

func hasOption(opts, o string) bool {
	for p := range strings.SplitSeq(opts, ",") {
		if p == o {
			return true
		}
	}
	return false
}

// field is the field named exactly name, and its index.
func (s *structInfo) field(name []byte) (*fieldInfo, int) {
	for k := range s.fields {
		if s.fields[k].name == string(name) {
			return &s.fields[k], k
		}
	}
	return nil, -1
}

// folded is the field whose name equals name ignoring case, as
// encoding/json folds names (Unicode simple folding: "ſ" is "s", the
// Kelvin sign "k").
func (s *structInfo) folded(name []byte) *fieldInfo {
	for k := range s.fields {
		if bytes.EqualFold([]byte(s.fields[k].name), name) {
			return &s.fields[k]
		}
	}
	return nil
}
