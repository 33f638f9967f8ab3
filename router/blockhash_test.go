package router

import (
	"slices"
	"testing"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// AppendBlockHashes gives the prefix index's own keys, and extending a
// chain block by block gives the same hashes as hashing at once.
func TestAppendBlockHashes(t *testing.T) {
	tokens := make([]int32, 1000)
	for i := range tokens {
		tokens[i] = int32(i*7919) ^ 0x5a5a
	}
	for _, tc := range []struct {
		tpb        int
		lora, salt uint64
		wantBlocks int
	}{{16, 0, 0, 62}, {32, 7, 0, 31}, {1, 0, 9, 1000}, {1000, 1, 2, 1}, {1001, 0, 0, 0}} {
		got := AppendBlockHashes(nil, tokens, tc.tpb, tc.lora, tc.salt)
		want := prefix.AppendHashes(nil, tokens, tc.tpb, tc.lora, tc.salt)
		if !slices.Equal(got, want) || len(got) != tc.wantBlocks {
			t.Errorf("tpb %d: %d hashes, want the index's %d (%d blocks)", tc.tpb, len(got), len(want), tc.wantBlocks)
		}
		var inc []uint64
		for n := 0; n <= len(tokens); n += 97 {
			inc = AppendBlockHashes(inc, tokens[:n], tc.tpb, tc.lora, tc.salt)
		}
		inc = AppendBlockHashes(inc, tokens, tc.tpb, tc.lora, tc.salt)
		if !slices.Equal(inc, want) {
			t.Errorf("tpb %d: extending the chain gave different hashes", tc.tpb)
		}
	}
	if a, b := AppendBlockHashes(nil, tokens, 16, 1, 0), AppendBlockHashes(nil, tokens, 16, 2, 0); a[0] == b[0] {
		t.Error("different LoRA scopes share a block hash")
	}
	if got := AppendBlockHashes([]uint64{1}, tokens, 0, 0, 0); !slices.Equal(got, []uint64{1}) {
		t.Errorf("tokensPerBlock 0: %v, want the input unchanged", got)
	}
}
