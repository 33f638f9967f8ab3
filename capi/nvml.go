package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"sync"
	"time"

	"github.com/adprouter/adprouter/internal/limits"
	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/nvml"
)

// monitors rate-limits memory reads per (device, interval), for
// adpr_rank_state_fill_kv. It is a cache, bounded to maxMonitors entries and
// emptied by adpr_nvml_shutdown, so a host cycling through device names or
// intervals cannot grow it. Losing an entry only costs one extra NVML read.
var monitors = monitorCache{limit: maxMonitors}

// maxMonitors bounds the monitor cache: far above one process's GPUs.
const maxMonitors = 64

// maxDeviceBytes bounds a device selector's length (ADPR_MAX_DEVICE_BYTES):
// a UUID is 40 bytes, a MIG UUID about 44.
const maxDeviceBytes = limits.MaxDeviceBytes

// monitorCache maps (device, interval) to its Monitor, holding at most limit
// entries: a full cache is emptied before the next entry is added (simple,
// and any order of eviction is fine for a cache of rate limiters).
type monitorCache struct {
	mu    sync.Mutex
	limit int
	m     map[monitorKey]*nvml.Monitor
}

// get returns key's monitor, made with open on a miss; an error from open
// is returned and nothing is cached.
func (c *monitorCache) get(key monitorKey, open func() (*nvml.Monitor, error)) (*nvml.Monitor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.m[key]; m != nil {
		return m, nil
	}
	m, err := open()
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = make(map[monitorKey]*nvml.Monitor)
	}
	if len(c.m) >= c.limit {
		clear(c.m)
	}
	c.m[key] = m
	return m, nil
}

// len returns the number of cached monitors.
func (c *monitorCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// clear empties the cache.
func (c *monitorCache) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

type monitorKey struct {
	device   string
	interval time.Duration
}

// deviceString copies a device selector, which must be non-NULL and at most
// maxDeviceBytes long.
func deviceString(p *C.char) (string, error) {
	if p == nil {
		return "", argError("device is NULL, want a UUID, PCI bus id or NVML index")
	}
	return boundedString(p, maxDeviceBytes, "device")
}

//export adprgo_nvml_init
func adprgo_nvml_init(ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_nvml_init", ebuf, elen, func() (err error) {
		err = nvml.Init()
		return
	})
}

//export adprgo_nvml_shutdown
func adprgo_nvml_shutdown(ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_nvml_shutdown", ebuf, elen, func() (err error) {
		if err = nvml.Shutdown(); err == nil {
			monitors.clear()
		}
		return
	})
}

//export adprgo_nvml_device_count
func adprgo_nvml_device_count(out *C.int32_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_nvml_device_count", ebuf, elen, func() (err error) {
		if out == nil {
			err = argError("out is NULL")
			return
		}
		n, e := nvml.DeviceCount()
		if err = e; err == nil {
			*out = C.int32_t(n)
		}
		return
	})
}

func readMemory(dev *C.char) (nvml.MemoryInfo, error) {
	s, err := deviceString(dev)
	if err != nil {
		return nvml.MemoryInfo{}, err
	}
	ref, err := nvml.ParseDeviceRef(s)
	if err != nil {
		return nvml.MemoryInfo{}, err
	}
	return nvml.ReadMemory(ref)
}

//export adprgo_nvml_memory
func adprgo_nvml_memory(dev *C.char, out *C.adpr_memory_info, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_nvml_memory", ebuf, elen, func() (err error) {
		if out == nil {
			err = argError("out is NULL")
			return
		}
		var m nvml.MemoryInfo
		if m, err = readMemory(dev); err != nil {
			return
		}
		*out = C.adpr_memory_info{
			total_bytes:    C.uint64_t(m.TotalBytes),
			free_bytes:     C.uint64_t(m.FreeBytes),
			used_bytes:     C.uint64_t(m.UsedBytes),
			reserved_bytes: C.uint64_t(m.ReservedBytes),
		}
		if m.HasReserved {
			out.has_reserved = 1
		}
		return
	})
}

//export adprgo_kv_bytes_per_token
func adprgo_kv_bytes_per_token(shape *C.adpr_kv_shape, out *C.uint64_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_kv_bytes_per_token", ebuf, elen, func() (err error) {
		if shape == nil || out == nil {
			err = argError("shape and out must not be NULL")
			return
		}
		s := kvsize.KVShape{
			Attention:     kvsize.Attention(shape.attention),
			DType:         kvsize.DType(shape.dtype),
			Layers:        int(shape.layers),
			KVHeads:       int(shape.kv_heads),
			HeadDim:       int(shape.head_dim),
			AttentionTP:   int(shape.attention_tp),
			KVLoraRank:    int(shape.kv_lora_rank),
			QKRopeHeadDim: int(shape.qk_rope_head_dim),
		}
		bpt, e := s.BytesPerToken()
		if err = e; err == nil {
			*out = C.uint64_t(bpt)
		}
		return
	})
}

//export adprgo_size_kv
func adprgo_size_kv(b *C.adpr_kv_budget, reason *C.char, rlen C.size_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_size_kv", ebuf, elen, func() (err error) {
		if b == nil {
			err = argError("budget is NULL")
			return
		}
		if rlen > 0 && reason == nil {
			err = argError("reason is NULL with reason_len = %d", uint64(rlen))
			return
		}
		got, e := kvsize.SizeKV(kvsize.SizeInput{
			FreeBytes:      uint64(b.free_bytes),
			ReserveBytes:   uint64(b.reserve_bytes),
			Fraction:       float64(b.fraction),
			BytesPerToken:  uint64(b.bytes_per_token),
			TokensPerBlock: uint64(b.tokens_per_block),
			MaxTokens:      uint64(b.max_tokens),
		})
		if err = e; err != nil {
			return
		}
		b.fraction = C.double(got.Fraction)
		b.tokens_per_block = C.uint64_t(got.TokensPerBlock)
		b.available_bytes = C.uint64_t(got.AvailableBytes)
		b.usable_bytes = C.uint64_t(got.UsableBytes)
		b.fit_tokens = C.uint64_t(got.FitTokens)
		b.tokens = C.uint64_t(got.Tokens)
		b.blocks = C.uint64_t(got.Blocks)
		b.capped = 0
		if got.Capped {
			b.capped = 1
		}
		writeError(reason, rlen, got.Reason)
		return
	})
}

//export adprgo_rank_state_fill_kv
func adprgo_rank_state_fill_kv(state *C.adpr_rank_state, capacity, free C.int64_t, dev *C.char,
	guardBand, bytesPerToken C.uint64_t, intervalMS C.int32_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_rank_state_fill_kv", ebuf, elen, func() (err error) {
		switch {
		case state == nil:
			err = argError("state is NULL")
		case capacity < 0 || free < 0 || free > capacity:
			err = argError("capacity_tokens = %d, free_tokens = %d, want 0 <= free <= capacity", int64(capacity), int64(free))
		}
		if err != nil {
			return
		}
		if dev == nil {
			state.kv_capacity_tokens, state.free_kv_tokens = capacity, free
			state.flags &^= C.ADPR_RANK_MEMORY_PRESSURE
			return
		}
		if bytesPerToken == 0 {
			err = argError("bytes_per_token is 0; want the KV bytes of one token (adpr_kv_bytes_per_token)")
			return
		}
		var name string
		if name, err = deviceString(dev); err != nil {
			return
		}
		var m *nvml.Monitor
		if m, err = monitorFor(name, int32(intervalMS)); err != nil {
			return
		}
		reading, e := m.Read()
		if err = e; err != nil {
			return
		}
		adm, e := kvsize.Guard(kvsize.GuardInput{
			CapacityTokens:  uint64(capacity),
			FreeTokens:      uint64(free),
			DeviceFreeBytes: reading.Memory.FreeBytes,
			GuardBandBytes:  uint64(guardBand),
			BytesPerToken:   uint64(bytesPerToken),
		})
		if err = e; err != nil {
			return
		}
		state.kv_capacity_tokens = C.int64_t(adm.CapacityTokens)
		state.free_kv_tokens = C.int64_t(adm.FreeTokens)
		state.flags &^= C.ADPR_RANK_MEMORY_PRESSURE
		if adm.MemoryPressure {
			state.flags |= C.ADPR_RANK_MEMORY_PRESSURE
		}
		return
	})
}

// monitorFor returns the rate-limited reader of device's memory.
func monitorFor(device string, intervalMS int32) (*nvml.Monitor, error) {
	ref, err := nvml.ParseDeviceRef(device)
	if err != nil {
		return nil, err
	}
	interval := time.Duration(intervalMS) * time.Millisecond
	if intervalMS < 0 {
		interval = -1
	}
	return monitors.get(monitorKey{device, interval}, func() (*nvml.Monitor, error) {
		d, err := nvml.DeviceFor(ref)
		if err != nil {
			return nil, err
		}
		return nvml.NewMonitor(d, interval), nil
	})
}
