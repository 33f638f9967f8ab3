package main

import (
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router"
)

// Every preset's text, for every policy, is its options as "key=value"
// lines, in the order the library applies them.
func TestPresetText(t *testing.T) {
	for _, name := range router.Presets() {
		for _, p := range []router.Policy{router.PolicyDefault, router.PolicyKVCacheAware, router.PolicyConversation} {
			text, err := presetText(name, string(p))
			if err != nil {
				t.Fatalf("preset %q, policy %s: %v", name, p, err)
			}
			kv, _ := router.PresetOptions(name, p)
			var want strings.Builder
			for _, o := range kv {
				want.WriteString(o[0] + "=" + o[1] + "\n")
			}
			if string(text) != want.String() {
				t.Errorf("preset %q, policy %s: %q, want %q", name, p, text, want.String())
			}
		}
	}
	if _, err := presetText("no-such", "default"); err == nil {
		t.Error("an unknown preset: no error")
	}
}
