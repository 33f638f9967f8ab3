package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"github.com/adprouter/adprouter/internal/limits"
	"github.com/adprouter/adprouter/router"
)

// The header's limits are generated from the Go constants
// (internal/schemagen); these arrays have a negative length, which does not
// compile, when the header this library is built against says otherwise.
var (
	_ [C.ADPR_MAX_OPTIONS - limits.MaxOptions]struct{}
	_ [limits.MaxOptions - C.ADPR_MAX_OPTIONS]struct{}
	_ [C.ADPR_MAX_OPTION_BYTES - limits.MaxOptionBytes]struct{}
	_ [limits.MaxOptionBytes - C.ADPR_MAX_OPTION_BYTES]struct{}
	_ [C.ADPR_MAX_DP_SIZE - router.MaxDPSize]struct{}
	_ [router.MaxDPSize - C.ADPR_MAX_DP_SIZE]struct{}
	_ [maxRequests - limits.MaxRequests]struct{}
	_ [limits.MaxRequests - maxRequests]struct{}
	_ [C.ADPR_MAX_REQUESTS - limits.MaxRequests]struct{}
	_ [limits.MaxRequests - C.ADPR_MAX_REQUESTS]struct{}
	_ [C.ADPR_MAX_CONVERSATION_ID_BYTES - router.MaxConversationIDBytes]struct{}
	_ [router.MaxConversationIDBytes - C.ADPR_MAX_CONVERSATION_ID_BYTES]struct{}
	_ [C.ADPR_PREFIX_TOKENS - router.PrefixTokens]struct{}
	_ [router.PrefixTokens - C.ADPR_PREFIX_TOKENS]struct{}
	_ [C.ADPR_MAX_TOKENS_PER_BLOCK - router.MaxTokensPerBlock]struct{}
	_ [router.MaxTokensPerBlock - C.ADPR_MAX_TOKENS_PER_BLOCK]struct{}
	_ [C.ADPR_MAX_DEVICE_BYTES - limits.MaxDeviceBytes]struct{}
	_ [limits.MaxDeviceBytes - C.ADPR_MAX_DEVICE_BYTES]struct{}
	_ [C.ADPR_MESSAGE_MAX - limits.MessageMax]struct{}
	_ [limits.MessageMax - C.ADPR_MESSAGE_MAX]struct{}
)
