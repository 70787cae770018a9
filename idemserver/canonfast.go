package idemserver

import "bytes"

// maxFastDepth bounds the nesting alreadyCanonical follows; deeper documents take the full
// pass.
const maxFastDepth = 32

// alreadyCanonical reports whether a document json.Valid accepted is its own canonical form,
// so that canonicalizeWith can return it as it is, with no duplicate member, instead of
// building its tables: most clients send compact JSON with sorted members. That holds when
// it has no whitespace outside strings and, in every object, every member name is plain
// (ASCII, no escape) and the names as written, quotes included, increase strictly in byte
// order: then the full pass emits each value verbatim and each object's members in the order
// they came (sorted, they stay where they are; found alike, they are kept in input order
// anyway), and plain names that all differ as written decode to names that all differ, so
// there is no duplicate to report. Anything else, or a document nested deeper than
// maxFastDepth, is left to the full pass; FuzzCanonicalFastPath holds the two to the same
// result for every input.
func alreadyCanonical(in []byte) bool {
	type frame struct {
		object  bool
		wantKey bool   // the next string in this object is a member name
		prev    []byte // the previous member name, quotes included
	}
	var stack [maxFastDepth]frame
	depth := 0
	for i := 0; i < len(in); i++ {
		switch b := in[i]; b {
		case ' ', '\t', '\n', '\r':
			return false
		case '{', '[':
			if depth == len(stack) {
				return false
			}
			stack[depth] = frame{object: b == '{', wantKey: b == '{'}
			depth++
		case '}', ']':
			depth--
		case ',':
			if f := &stack[depth-1]; f.object {
				f.wantKey = true
			}
		case '"':
			end := stringEnd(in, i)
			if depth > 0 && stack[depth-1].wantKey {
				f := &stack[depth-1]
				name := in[i:end]
				for _, c := range name[1 : len(name)-1] {
					if c == '\\' || c >= 0x80 {
						return false
					}
				}
				if f.prev != nil && bytes.Compare(f.prev, name) >= 0 {
					return false
				}
				f.prev, f.wantKey = name, false
			}
			i = end - 1
		}
	}
	return true
}
