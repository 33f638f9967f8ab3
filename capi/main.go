// Command capi is the C ABI of adprouter, built with
// go build -buildmode=c-shared into libadprouter.so. It holds only the
// exported functions and what they need: the handle table, argument
// checking, C <-> Go conversion, panic recovery and error text. Routing lives
// in package router; the public contract is include/adprouter.h.
//
// The public adpr_* functions are C (abi.c): each is defined with the
// header's own prototype, so the compiler checks the header against the
// implementation, and each refuses to run in a child after fork() before
// entering the Go runtime. They call the Go exports adprgo_* of this
// package, which the version script keeps out of the dynamic symbol table.
// Every Go export runs its work through guard (guard.go), which recovers
// panics.
package main

/*
#cgo CFLAGS: -Werror=incompatible-pointer-types -Werror=int-conversion -Werror=discarded-qualifiers -Werror=implicit-function-declaration
#include "adprouter.h"
*/
import "C"

import (
	"unsafe"

	"github.com/adprouter/adprouter/router"
)

func main() {}

//export adprgo_router_create
func adprgo_router_create(opts *C.adpr_option, nopts C.int32_t, out *C.adpr_router, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_router_create", ebuf, elen, func() error {
		switch {
		case out == nil:
			return argError("out is NULL, want a pointer to an adpr_router")
		case nopts < 0 || nopts > maxOptions || (nopts > 0 && opts == nil):
			return argError("options = %p with num_options = %d, want a non-NULL array of 0..%d options", opts, int32(nopts), maxOptions)
		}
		kv := make([][2]string, 0, int(nopts))
		for i, o := range unsafe.Slice(opts, int(nopts)) {
			if o.key == nil || o.value == nil {
				return argError("options[%d] has a NULL key or value", i)
			}
			k, err := boundedString(o.key, maxOptionBytes, "options[%d].key", i)
			if err != nil {
				return err
			}
			v, err := boundedString(o.value, maxOptionBytes, "options[%d].value", i)
			if err != nil {
				return err
			}
			kv = append(kv, [2]string{k, v})
		}
		cfg, err := router.ParseOptions(kv)
		if err != nil {
			return err
		}
		r, err := router.New(cfg)
		if err != nil {
			return err
		}
		*out = C.adpr_router(handles.add(r))
		return nil
	})
}

// Bounds on adpr_router_create's arguments: far above any real
// configuration, low enough that a corrupt count or an unterminated string
// costs a clear error instead of the host's memory.
const (
	maxOptions     = 256
	maxOptionBytes = 4096
)

// boundedString copies the NUL-terminated string p, reading at most max
// bytes; a longer one is an argError naming what (a format with args). It
// reads in Go, byte by byte, so that a wild pointer faults where guard can
// recover it and a short string at the end of a page is never over-read.
func boundedString(p *C.char, max int, what string, args ...any) (string, error) {
	base := unsafe.Pointer(p)
	for n := 0; n <= max; n++ {
		if *(*byte)(unsafe.Add(base, n)) == 0 {
			return string(unsafe.Slice((*byte)(base), n)), nil
		}
	}
	return "", argError(what+" is longer than %d bytes (or not NUL-terminated)", append(args, max)...)
}

// presetOptionsMax bounds every preset's text with its NUL (the header's
// promise to callers sizing a buffer; TestPresetTextFits keeps it).
const presetOptionsMax = C.ADPR_PRESET_OPTIONS_MAX

// presetText is adpr_preset_options' text: one "key=value\n" line per
// option preset sets for policy.
func presetText(preset, policy string) ([]byte, error) {
	kv, err := router.PresetOptions(preset, router.Policy(policy))
	if err != nil {
		return nil, err
	}
	var text []byte
	for _, o := range kv {
		text = append(append(append(append(text, o[0]...), '='), o[1]...), '\n')
	}
	return text, nil
}

//export adprgo_preset_options
func adprgo_preset_options(name, policy *C.char, out *C.char, olen C.size_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_preset_options", ebuf, elen, func() error {
		switch {
		case name == nil || policy == nil:
			return argError("preset or policy is NULL, want NUL-terminated strings")
		case out == nil || olen == 0:
			return argError("out is NULL or out_len is 0, want a buffer")
		}
		n, err := boundedString(name, maxOptionBytes, "preset")
		if err != nil {
			return err
		}
		p, err := boundedString(policy, maxOptionBytes, "policy")
		if err != nil {
			return err
		}
		text, err := presetText(n, p)
		if err != nil {
			return err
		}
		if uint64(len(text)) >= uint64(olen) {
			return argError("out_len = %d, want at least %d bytes for preset %q", uint64(olen), len(text)+1, n)
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(out)), len(text)+1)
		copy(dst, text)
		dst[len(text)] = 0
		return nil
	})
}

//export adprgo_router_destroy
func adprgo_router_destroy(h C.adpr_router) C.adpr_status {
	return guard("adpr_router_destroy", nil, 0, func() error {
		return handles.remove(uint64(h))
	})
}

//export adprgo_router_tokens_read
func adprgo_router_tokens_read(h C.adpr_router, out *C.int32_t) C.adpr_status {
	return guardRouter("adpr_router_tokens_read", h, nil, 0, func(e *entry) error {
		if out == nil {
			return argError("out is NULL, want a pointer to an int32_t")
		}
		*out = C.int32_t(e.r.TokensRead())
		return nil
	})
}

//export adprgo_router_state_digest
func adprgo_router_state_digest(h C.adpr_router, out *C.uint64_t) C.adpr_status {
	return guardRouter("adpr_router_state_digest", h, nil, 0, func(e *entry) error {
		if out == nil {
			return argError("out is NULL, want a pointer to a uint64_t")
		}
		*out = C.uint64_t(e.r.StateDigest())
		return nil
	})
}
