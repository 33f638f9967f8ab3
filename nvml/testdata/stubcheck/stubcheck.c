// stubcheck.c: exercises the generated forwarding stubs
// (../../zz_stubs_linux_amd64.S with ../../resolve_linux_amd64.c) directly,
// against target.c built as libnvidia-ml.so.1:
//
//	gcc -O2 -pthread -o DIR/stubcheck stubcheck.c ../../zz_stubs_linux_amd64.S ../../resolve_linux_amd64.c -ldl
//	LD_LIBRARY_PATH=DIR DIR/stubcheck
//
// It prints "ok" and exits 0 when every check passes.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The stubs, called with target.c's made-up signatures (not NVML's).
int nvmlDeviceGetCount_v2(long, long, long, long, long, long,
		double, double, double, double, double, double, double, double, long, double);
int nvmlDeviceGetUUID(int n, ...);
int nvmlDeviceGetCount(long tag);
int nvmlDeviceGetMemoryInfo_v2(void); // not in target.c
const char *nvmlErrorString(int);     // not in target.c

static int failures;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		failures++; \
	} \
} while (0)

static int all_registers(void) {
	return nvmlDeviceGetCount_v2(0x1111111111111111L, 0x2222222222222222L, 0x3333333333333333L,
		0x4444444444444444L, 0x5555555555555555L, 0x6666666666666666L,
		0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, -7, 8.25);
}

enum { THREADS = 8, CALLS = 20000 };
static pthread_barrier_t barrier;

static void *hammer(void *arg) {
	long tag = (long)arg;
	pthread_barrier_wait(&barrier);
	for (int i = 0; i < CALLS; i++) {
		if (nvmlDeviceGetCount(tag + i) != (int)(tag + i)) {
			return (void *)1;
		}
	}
	return NULL;
}

int main(void) {
	// Before libnvidia-ml.so.1 is loaded: NVML_ERROR_UNINITIALIZED, no crash.
	CHECK(all_registers() == 1, "unloaded: got %d, want 1 (NVML_ERROR_UNINITIALIZED)", all_registers());
	const char *msg = nvmlErrorString(0);
	CHECK(msg != NULL && strstr(msg, "not loaded") != NULL, "unloaded: nvmlErrorString gave %s", msg ? msg : "NULL");
	CHECK(dlerror() == NULL, "a failed lookup left a dlerror() message behind");

	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		fprintf(stderr, "FAIL: dlopen target: %s\n", dlerror());
		return 1;
	}

	// First call resolves (slow path), the second uses the cache.
	for (int i = 0; i < 2; i++) {
		int r = all_registers();
		CHECK(r == 0, "call %d: target saw a wrong argument (code %d)", i, r);
		r = nvmlDeviceGetUUID(3, 1.25, 2.5, 3.75);
		CHECK(r == 0, "variadic call %d: target saw a wrong argument (code %d)", i, r);
	}

	// A function the library lacks: NVML_ERROR_FUNCTION_NOT_FOUND, every time.
	for (int i = 0; i < 2; i++) {
		int r = nvmlDeviceGetMemoryInfo_v2();
		CHECK(r == 13, "missing function call %d: got %d, want 13", i, r);
	}
	msg = nvmlErrorString(0);
	CHECK(msg != NULL && strstr(msg, "not found") != NULL, "missing nvmlErrorString gave %s", msg ? msg : "NULL");

	// Concurrent first calls of one stub.
	pthread_t th[THREADS];
	pthread_barrier_init(&barrier, NULL, THREADS);
	for (long t = 0; t < THREADS; t++) {
		pthread_create(&th[t], NULL, hammer, (void *)(t * 1000000));
	}
	for (int t = 0; t < THREADS; t++) {
		void *res;
		pthread_join(th[t], &res);
		CHECK(res == NULL, "thread %d got a wrong result", t);
	}

	// The first lookup pinned the library: after the loader's own handle is
	// closed, the cached pointers still work.
	dlclose(h);
	CHECK(all_registers() == 0, "after dlclose: cached pointer no longer valid");

	if (failures) {
		return 1;
	}
	puts("ok");
	return 0;
}
