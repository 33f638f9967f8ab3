// Static strings handed to C callers: they must not live in Go memory.
#include <stdint.h>
#include "adprouter.h"

const char *capi_status_text(int32_t status) {
    switch (status) {
    case ADPR_OK: return "ok";
    case ADPR_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ADPR_ERR_INVALID_HANDLE: return "invalid router handle";
    case ADPR_ERR_CONFIG: return "invalid configuration";
    case ADPR_ERR_INTERNAL: return "internal error";
    case ADPR_ERR_NVML_UNAVAILABLE: return "NVML unavailable (no NVIDIA driver, or adpr_nvml_init not called)";
    case ADPR_ERR_GPU_LOST: return "GPU lost";
    case ADPR_ERR_NOT_SUPPORTED: return "not supported by this GPU or driver";
    case ADPR_ERR_NO_PERMISSION: return "insufficient permissions";
    case ADPR_ERR_NOT_FOUND: return "no GPU matches the device selector";
    case ADPR_ERR_NVML: return "NVML error";
    case ADPR_ERR_FORKED: return "called in a child after fork() without exec: create workers with exec (spawn or forkserver)";
    case ADPR_ERR_SHORT_BUFFER: return "output buffer too small: the totals say how large";
    default: return "unknown status";
    }
}

const char *capi_version(void) { return ADPR_VERSION; }
