package keystore_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/idemkit/idem/keystore"
)

// SecretHeader names what StripSecrets removes: the credential headers in any letter case,
// and the extra lists' names, nothing else.
func TestSecretHeader(t *testing.T) {
	extra := []string{"X-Api-Key"}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"Authorization", true},
		{"authorization", true},
		{"COOKIE", true},
		{"Proxy-Authorization", true},
		{"x-api-key", true},
		{"Set-Cookie", false}, // only in the response list, not given here
		{"Content-Type", false},
		{"", false},
	} {
		assert.Equal(t, tc.want, keystore.SecretHeader(tc.name, extra), tc.name)
		_, kept := keystore.StripSecrets(map[string][]string{tc.name: {"v"}}, extra...)[tc.name]
		assert.Equal(t, !tc.want, kept, "StripSecrets agrees on %q", tc.name)
	}
	assert.True(t, keystore.SecretHeader("set-cookie", keystore.ResponseSecretHeaders))
	assert.False(t, keystore.SecretHeader("X-Api-Key"))
}
