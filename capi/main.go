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
	"fmt"
	"unsafe"

	"github.com/adprouter/adprouter/internal/limits"
	"github.com/adprouter/adprouter/router"
)

func main() {}

//export adprgo_router_create
func adprgo_router_create(opts *C.adpr_option, nopts C.int32_t, out *C.adpr_router, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_router_create", ebuf, elen, func() error {
		switch {
		case out == nil:
			return argError("out is NULL, want a pointer to an adpr_router")
		case nopts < 0 || nopts > limits.MaxOptions || (nopts > 0 && opts == nil):
			return argError("options = %p with num_options = %d, want a non-NULL array of 0..%d options", opts, int32(nopts), limits.MaxOptions)
		}
		kv := make([][2]string, 0, int(nopts))
		all := unsafe.Slice(opts, int(nopts))
		for i := range all {
			o := &all[i] // read in place: a copy would hold its pointers (see minPointer)
			if o.key == nil || o.value == nil {
				return argError("options[%d] has a NULL key or value", i)
			}
			if k := uintptr(unsafe.Pointer(o.key)); nearNull(k) {
				return nearNullError(fmt.Sprintf("options[%d].key", i), k)
			}
			if v := uintptr(unsafe.Pointer(o.value)); nearNull(v) {
				return nearNullError(fmt.Sprintf("options[%d].value", i), v)
			}
			k, err := boundedString(o.key, limits.MaxOptionBytes, "options[%d].key", i)
			if err != nil {
				return err
			}
			v, err := boundedString(o.value, limits.MaxOptionBytes, "options[%d].value", i)
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

// presetText is adpr_preset_options' text: one "key=value\n" line per
// option preset sets for policy.
func presetText(preset, policy string) ([]byte, error) {
	kv, err := router.PresetOptions(preset, router.Policy(policy))
	if err != nil {
		return nil, err
	}
	return optionLines(kv), nil
}

// optionLines writes key/value pairs as "key=value\n" lines.
func optionLines(kv [][2]string) []byte {
	var text []byte
	for _, o := range kv {
		text = append(append(append(append(text, o[0]...), '='), o[1]...), '\n')
	}
	return text
}

//export adprgo_preset_options
func adprgo_preset_options(name, policy *C.char, out *C.char, capacity C.int64_t, total *C.int64_t,
	ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_preset_options", ebuf, elen, func() error {
		buf := textBuffer("out", out, capacity, total)
		if name == nil || policy == nil {
			return argError("preset or policy is NULL, want NUL-terminated strings")
		}
		if err := checkBuffers(buf); err != nil {
			return err
		}
		n, err := boundedString(name, limits.MaxOptionBytes, "preset")
		if err != nil {
			return err
		}
		p, err := boundedString(policy, limits.MaxOptionBytes, "policy")
		if err != nil {
			return err
		}
		text, err := presetText(n, p)
		if err != nil {
			return err
		}
		return putText(buf, text)
	})
}

// schemaJSON is adpr_option_schema's text, built once.
var schemaJSON = router.OptionSchemaJSON()

//export adprgo_option_schema
func adprgo_option_schema(out *C.char, capacity C.int64_t, total *C.int64_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_option_schema", ebuf, elen, func() error {
		buf := textBuffer("out", out, capacity, total)
		if err := checkBuffers(buf); err != nil {
			return err
		}
		return putText(buf, schemaJSON)
	})
}

//export adprgo_router_options
func adprgo_router_options(h C.adpr_router, out *C.char, capacity C.int64_t, total *C.int64_t,
	ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_options", h, ebuf, elen, func(e *entry) error {
		buf := textBuffer("out", out, capacity, total)
		if err := checkBuffers(buf); err != nil {
			return err
		}
		return putText(buf, optionLines(router.EffectiveOptions(e.r.Config())))
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
