package nvml

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseDeviceRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DeviceRef
		err  bool
	}{
		{"GPU-0f3a", ByUUID("GPU-0f3a"), false},
		{"MIG-1234", ByUUID("MIG-1234"), false},
		{"uuid:GPU-x", ByUUID("GPU-x"), false},
		{"00000000:3B:00.0", ByPCIBusID("00000000:3B:00.0"), false},
		{"pci:0000:3b:00.0", ByPCIBusID("0000:3b:00.0"), false},
		{"3", ByIndex(3), false},
		{"index:0", ByIndex(0), false},
		{"", DeviceRef{}, true},
		{"cuda0", DeviceRef{}, true},
		{"index:-1", DeviceRef{}, true},
		{"index:x", DeviceRef{}, true},
		{"uuid:", DeviceRef{}, true},
		{"65535", ByIndex(65535), false},
		{"index:65536", DeviceRef{}, true},
		{"4294967296", DeviceRef{}, true}, // 2^32 would wrap to GPU 0 in NVML's unsigned int
		{"index:+1", DeviceRef{}, true},
		{"index:99999999999999999999", DeviceRef{}, true},
	} {
		got, err := ParseDeviceRef(tc.in)
		if tc.err {
			assert.ErrorIs(t, err, ErrInvalidArgument, "ParseDeviceRef(%q)", tc.in)
			continue
		}
		assert.NoError(t, err, "ParseDeviceRef(%q)", tc.in)
		assert.Equal(t, tc.want, got, "ParseDeviceRef(%q)", tc.in)
	}
}
