//go:build cgo

// Lazy resolution for the generated nvml* forwarding stubs
// (zz_stubs_linux_amd64.S). See doc.go, "NVML inside a shared library".

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

// Return kinds, as written by nvml/internal/stubgen.
enum {
	ADPR_NVML_RETURNS_STATUS = 0, // nvmlReturn_t
	ADPR_NVML_RETURNS_STRING = 1, // const char*
};

// NVML codes the stubs return when the real function cannot be called.
enum {
	ADPR_NVML_ERROR_UNINITIALIZED = 1,       // libnvidia-ml.so.1 not loaded
	ADPR_NVML_ERROR_FUNCTION_NOT_FOUND = 13, // loaded, but lacks the symbol
};

// The per-symbol descriptor the generated assembly lays out in .data.
struct adpr_nvml_stub {
	_Atomic(void *) fn; // resolved function, NULL until the first resolution
	uint64_t kind;      // ADPR_NVML_RETURNS_*
	char name[];        // symbol name, NUL-terminated
};

// The driver library, once found. Opened with RTLD_NODELETE so it is never
// unmapped, even after go-nvml's Shutdown dlcloses its own handle: a pointer
// cached in a descriptor stays valid for the life of the process.
static _Atomic(void *) adpr_nvml_lib;

static const char adpr_nvml_msg_uninitialized[] =
	"NVML not loaded (libnvidia-ml.so.1 is not in this process)";
static const char adpr_nvml_msg_not_found[] =
	"Function not found in libnvidia-ml.so.1";

static void *adpr_nvml_fail(struct adpr_nvml_stub *s, uint64_t *fallback, int code) {
	(void)dlerror(); // do not leave our failure for someone else's dlerror()
	if (s->kind == ADPR_NVML_RETURNS_STRING) {
		const char *msg = code == ADPR_NVML_ERROR_UNINITIALIZED
			? adpr_nvml_msg_uninitialized : adpr_nvml_msg_not_found;
		*fallback = (uint64_t)(uintptr_t)msg;
	} else {
		*fallback = (uint64_t)code;
	}
	return NULL;
}

// adpr_nvml_resolve is called by a stub's slow path. It returns the real
// function for s, caching it in s->fn, or NULL after storing in *fallback
// what the stub must return instead. It only finds a library that is already
// loaded (RTLD_NOLOAD), normally by go-nvml's Init; it never loads one, so a
// call made before Init fails cleanly. Concurrent first calls may both
// resolve; they store the same pointer.
__attribute__((visibility("hidden")))
void *adpr_nvml_resolve(struct adpr_nvml_stub *s, uint64_t *fallback) {
	void *lib = atomic_load_explicit(&adpr_nvml_lib, memory_order_acquire);
	if (lib == NULL) {
		lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
		if (lib == NULL) {
			return adpr_nvml_fail(s, fallback, ADPR_NVML_ERROR_UNINITIALIZED);
		}
		void *expected = NULL;
		if (!atomic_compare_exchange_strong_explicit(&adpr_nvml_lib, &expected, lib,
				memory_order_acq_rel, memory_order_acquire)) {
			dlclose(lib); // another thread won; drop our extra reference
			lib = expected;
		}
	}
	void *fn = dlsym(lib, s->name);
	if (fn == NULL) {
		return adpr_nvml_fail(s, fallback, ADPR_NVML_ERROR_FUNCTION_NOT_FOUND);
	}
	atomic_store_explicit(&s->fn, fn, memory_order_release);
	return fn;
}
