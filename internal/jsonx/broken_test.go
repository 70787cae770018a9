package jsonx

import (
	"encoding/json"
	"testing"
)

// A body broken before its second name (a bad literal or number, a bad escape or a control
// byte in a string, a member with no value or an unquoted name inside a nested object)
// must give false: DuplicateMember's doc says "a body that is not valid JSON gives false",
// TestDuplicateMemberInvalid says no duplicate is reported "past the point where they
// break", and the json.Decoder walk it replaced gave false on every one of these. The walk
// skips values without checking them, so it steps over the break and reports the second
// "a". No caller is affected today (outcome.DecodeKeyStatus and withKeyField run
// json.Unmarshal first and never reach it on such a body), but a caller that relies on the
// documented contract to tell "malformed" from "ambiguous" would be told the wrong one.
// The walk alone stepped over these; json.Valid first keeps the contract.
func TestBrokenValueBeforeDuplicate(t *testing.T) {
	for _, body := range []string{
		`{"a":tru,"a":1}`,
		`{"a":nul,"A":1}`,
		`{"a":1x,"a":2}`,
		`{"a":01,"a":2}`,
		`{"a":"\q","a":1}`,
		`{"a":"\u12","a":1}`,
		"{\"a\":\"\x01\",\"a\":1}",
		`{"a":{"b"},"a":1}`,
		`{"a":{1:2},"a":1}`,
		`{"a":[1 2],"a":1}`,
		`{"a":[,],"a":1}`,
	} {
		if json.Valid([]byte(body)) {
			t.Fatalf("case %q is valid JSON", body)
		}
		if duplicateMemberTokens([]byte(body)) {
			t.Fatalf("the Decoder walk reports a duplicate in %q", body)
		}
		if DuplicateMember([]byte(body)) {
			t.Errorf("DuplicateMember(%q) = true; the body breaks before the second name", body)
		}
	}
}
