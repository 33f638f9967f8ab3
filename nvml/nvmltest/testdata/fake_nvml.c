// fake_nvml.c: a fake libnvidia-ml.so.1 for tests on machines without a GPU.
//
// Build:
//
//	gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o DIR/libnvidia-ml.so.1 fake_nvml.c
//
// and put DIR on LD_LIBRARY_PATH: go-nvml's Init then dlopens this library
// and every NVML call of package nvml runs the production code path against
// it. Add -DFAKE_NVML_NO_V2 to leave out nvmlDeviceGetMemoryInfo_v2, as in a
// driver older than the v2 call.
//
// Environment, read by the nvmlInit call that takes the reference count from
// 0 to 1:
//
//	FAKE_NVML_DEVICES       the GPUs, separated by ';', each
//	                        "uuid:total:free:reserved[:name]" with sizes in
//	                        bytes (decimal). free + reserved must not exceed
//	                        total. Device i has NVML index i and PCI bus id
//	                        "00000000:XX:00.0" with XX = i+1 in hexadecimal.
//	                        Unset: one device,
//	                        "GPU-fake-0:85899345920:80530636800:536870912:Fake GPU".
//	                        Set but empty: no devices. Malformed: nvmlInit
//	                        fails with NVML_ERROR_UNKNOWN (999) and says why on
//	                        stderr.
//	FAKE_NVML_INIT_ERROR    an nvmlReturn_t code every nvmlInit* returns,
//	                        e.g. 9 (DRIVER_NOT_LOADED) or 18 (LIB_RM_VERSION_MISMATCH).
//	FAKE_NVML_LOST_AFTER    N: the first N device calls (count, handle
//	                        lookups, memory, UUID, name) succeed, every later
//	                        one returns NVML_ERROR_GPU_IS_LOST (15).
//	FAKE_NVML_NO_PERMISSION "1": memory queries (v1 and v2) return
//	                        NVML_ERROR_NO_PERMISSION (4).
//	FAKE_NVML_MEMORY_ERROR  a code memory queries (v1 and v2) return,
//	                        e.g. 3 (NOT_SUPPORTED).
//	FAKE_NVML_V2_ERROR      a code nvmlDeviceGetMemoryInfo_v2 alone returns,
//	                        e.g. 3 (NOT_SUPPORTED), so callers fall back to v1.
//	FAKE_NVML_NO_V2         "1": nvmlDeviceGetMemoryInfo_v2 returns
//	                        NVML_ERROR_FUNCTION_NOT_FOUND (13), what package
//	                        nvml's forwarding stub returns on a driver without
//	                        it. (To remove the symbol itself, as in an old
//	                        driver, build with -DFAKE_NVML_NO_V2.)
//
// Like NVML, calls other than nvmlInit*, nvmlErrorString and
// nvmlSystemGetDriverVersion return NVML_ERROR_UNINITIALIZED (1) unless
// nvmlInit succeeded more often than nvmlShutdown.

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;

enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_UNKNOWN = 999,
};

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

#define MAX_DEVICES 16

struct nvmlDevice_st {
	char uuid[96];
	char name[96];
	char pci[32];
	unsigned int bus;
	unsigned long long total, free, reserved;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int refs;                 // nvmlInit minus nvmlShutdown
static struct nvmlDevice_st devices[MAX_DEVICES];
static atomic_uint ndevices;
static atomic_llong device_calls;      // for FAKE_NVML_LOST_AFTER
static long long lost_after = -1;      // -1: never
static nvmlReturn_t memory_error, v2_error;

static long long env_int(const char *name, long long def) {
	const char *s = getenv(name);
	if (s == NULL || *s == '\0') {
		return def;
	}
	return strtoll(s, NULL, 10);
}

// parse_devices fills devices from spec; returns 0, or -1 after printing why.
static int parse_devices(const char *spec) {
	unsigned n = 0;
	char buf[4096];
	if (strlen(spec) >= sizeof buf) {
		fprintf(stderr, "fake_nvml: FAKE_NVML_DEVICES longer than %zu bytes\n", sizeof buf - 1);
		return -1;
	}
	strcpy(buf, spec);
	char *save = NULL;
	for (char *item = strtok_r(buf, ";", &save); item != NULL; item = strtok_r(NULL, ";", &save)) {
		if (n == MAX_DEVICES) {
			fprintf(stderr, "fake_nvml: more than %d devices in FAKE_NVML_DEVICES\n", MAX_DEVICES);
			return -1;
		}
		struct nvmlDevice_st *d = &devices[n];
		memset(d, 0, sizeof *d);
		char name[96] = "Fake GPU";
		int got = sscanf(item, "%95[^:]:%llu:%llu:%llu:%95[^;]", d->uuid, &d->total, &d->free, &d->reserved, name);
		if (got < 4) {
			fprintf(stderr, "fake_nvml: device %u %s: want uuid:total:free:reserved[:name]\n", n, item);
			return -1;
		}
		if (d->free > d->total || d->reserved > d->total - d->free) {
			fprintf(stderr, "fake_nvml: device %u %s: free + reserved exceeds total\n", n, item);
			return -1;
		}
		snprintf(d->name, sizeof d->name, "%s", name);
		d->bus = n + 1;
		snprintf(d->pci, sizeof d->pci, "00000000:%02X:00.0", d->bus);
		n++;
	}
	atomic_store(&ndevices, n);
	return 0;
}

static nvmlReturn_t do_init(void) {
	nvmlReturn_t forced = (nvmlReturn_t)env_int("FAKE_NVML_INIT_ERROR", 0);
	if (forced != NVML_SUCCESS) {
		return forced;
	}
	pthread_mutex_lock(&mu);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (atomic_load(&refs) == 0) {
		const char *spec = getenv("FAKE_NVML_DEVICES");
		if (spec == NULL) {
			spec = "GPU-fake-0:85899345920:80530636800:536870912:Fake GPU";
		}
		if (parse_devices(spec) != 0) {
			ret = NVML_ERROR_UNKNOWN;
		}
		lost_after = env_int("FAKE_NVML_LOST_AFTER", -1);
		memory_error = (nvmlReturn_t)env_int("FAKE_NVML_MEMORY_ERROR", 0);
		if (env_int("FAKE_NVML_NO_PERMISSION", 0) != 0) {
			memory_error = NVML_ERROR_NO_PERMISSION;
		}
		v2_error = (nvmlReturn_t)env_int("FAKE_NVML_V2_ERROR", 0);
		if (env_int("FAKE_NVML_NO_V2", 0) != 0) {
			v2_error = NVML_ERROR_FUNCTION_NOT_FOUND;
		}
		atomic_store(&device_calls, 0);
	}
	if (ret == NVML_SUCCESS) {
		atomic_fetch_add(&refs, 1);
	}
	pthread_mutex_unlock(&mu);
	return ret;
}

nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
nvmlReturn_t nvmlInit(void) { return do_init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
	(void)flags;
	return do_init();
}

nvmlReturn_t nvmlShutdown(void) {
	pthread_mutex_lock(&mu);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (atomic_load(&refs) == 0) {
		ret = NVML_ERROR_UNINITIALIZED;
	} else {
		atomic_fetch_sub(&refs, 1);
	}
	pthread_mutex_unlock(&mu);
	return ret;
}

const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case 0: return "Success";
	case 1: return "Uninitialized";
	case 2: return "Invalid Argument";
	case 3: return "Not Supported";
	case 4: return "Insufficient Permissions";
	case 5: return "Already Initialized";
	case 6: return "Not Found";
	case 7: return "Insufficient Size";
	case 9: return "Driver Not Loaded";
	case 12: return "NVML Shared Library Not Found";
	case 13: return "Function Not Found";
	case 15: return "GPU is lost";
	case 16: return "GPU requires restart";
	case 18: return "RM has detected an NVML/RM version mismatch";
	case 25: return "Argument version mismatch";
	case 28: return "GPU not found";
	default: return "Unknown Error";
	}
}

// device_call counts a device query and says whether it may proceed.
static nvmlReturn_t device_call(void) {
	if (atomic_load(&refs) == 0) {
		return NVML_ERROR_UNINITIALIZED;
	}
	long long n = atomic_fetch_add(&device_calls, 1) + 1;
	if (lost_after >= 0 && n > lost_after) {
		return NVML_ERROR_GPU_IS_LOST;
	}
	return NVML_SUCCESS;
}

// check_device validates a handle returned by this library.
static nvmlReturn_t check_device(nvmlDevice_t d) {
	nvmlReturn_t ret = device_call();
	if (ret != NVML_SUCCESS) {
		return ret;
	}
	uintptr_t p = (uintptr_t)d, first = (uintptr_t)&devices[0];
	unsigned n = atomic_load(&ndevices);
	if (p < first || p >= first + n * sizeof devices[0] || (p - first) % sizeof devices[0] != 0) {
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
	nvmlReturn_t ret = device_call();
	if (ret != NVML_SUCCESS) {
		return ret;
	}
	if (count == NULL) {
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	*count = atomic_load(&ndevices);
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
	nvmlReturn_t ret = device_call();
	if (ret != NVML_SUCCESS) {
		return ret;
	}
	if (device == NULL || index >= atomic_load(&ndevices)) {
		return NVML_ERROR_INVALID_ARGUMENT; // as NVML does for an index out of range
	}
	*device = &devices[index];
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
	nvmlReturn_t ret = device_call();
	if (ret != NVML_SUCCESS) {
		return ret;
	}
	if (uuid == NULL || device == NULL || *uuid == '\0') {
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	unsigned n = atomic_load(&ndevices);
	for (unsigned i = 0; i < n; i++) {
		if (strcmp(devices[i].uuid, uuid) == 0) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

// PCI bus ids compare by value: "0000:3b:00.0" matches "00000000:3B:00.0".
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *device) {
	nvmlReturn_t ret = device_call();
	if (ret != NVML_SUCCESS) {
		return ret;
	}
	unsigned domain, bus, dev, fn;
	char extra;
	if (busId == NULL || device == NULL ||
	    sscanf(busId, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &extra) != 4) {
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	unsigned n = atomic_load(&ndevices);
	for (unsigned i = 0; i < n; i++) {
		if (domain == 0 && bus == devices[i].bus && dev == 0 && fn == 0) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *device) {
	return nvmlDeviceGetHandleByPciBusId_v2(busId, device);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	nvmlReturn_t ret = check_device(d);
	if (ret != NVML_SUCCESS) {
		return ret;
	}
	if (memory_error != NVML_SUCCESS) {
		return memory_error;
	}
	if (m == NULL) {
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	m->total = d->total;
	m->free = d->free;
	m->used = d->total - d->free; // v1: the driver's reservation counts as used
	return NVML_SUCCESS;
}

#ifndef FAKE_NVML_NO_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
	nvmlReturn_t ret = check_device(d);
	if (ret != NVML_SUCCESS) {
		return ret;
	}
	if (memory_error != NVML_SUCCESS) {
		return memory_error;
	}
	if (v2_error != NVML_SUCCESS) {
		return v2_error;
	}
	if (m == NULL) {
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	if (m->version != NVML_MEMORY_V2_VERSION) {
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	}
	m->total = d->total;
	m->reserved = d->reserved;
	m->free = d->free;
	m->used = d->total - d->free - d->reserved;
	return NVML_SUCCESS;
}
#endif

static nvmlReturn_t copy_string(const char *s, char *buf, unsigned int length) {
	if (buf == NULL) {
		return NVML_ERROR_INVALID_ARGUMENT;
	}
	if (strlen(s) + 1 > length) {
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
	nvmlReturn_t ret = check_device(d);
	return ret != NVML_SUCCESS ? ret : copy_string(d->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
	nvmlReturn_t ret = check_device(d);
	return ret != NVML_SUCCESS ? ret : copy_string(d->name, name, length);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
	return copy_string("999.99.99-fake", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
	return copy_string("99.999.99-fake", version, length);
}
