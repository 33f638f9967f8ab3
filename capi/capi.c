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
    default: return "unknown status";
    }
}

const char *capi_version(void) { return "0.1.0"; }
