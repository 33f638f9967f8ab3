package main

import (
	"testing"

	"github.com/adprouter/adprouter/router"
)

// Every preset's text, for every policy, fits the size adprouter.h promises.
func TestPresetTextFits(t *testing.T) {
	for _, name := range router.Presets() {
		for _, p := range []router.Policy{router.PolicyDefault, router.PolicyKVCacheAware, router.PolicyConversation} {
			text, err := presetText(name, string(p))
			if err != nil {
				t.Fatalf("preset %q, policy %s: %v", name, p, err)
			}
			if len(text)+1 > presetOptionsMax {
				t.Errorf("preset %q, policy %s: %d bytes with the NUL, over ADPR_PRESET_OPTIONS_MAX %d", name, p, len(text)+1, presetOptionsMax)
			}
		}
	}
}
