package nvml

import (
	"fmt"
	"strconv"
	"strings"
)

// MemoryInfo is one reading of a GPU's memory, in bytes.
//
// FreeBytes is the same whichever NVML call produced the reading. With the
// v2 call (HasReserved true), memory the driver reserves for itself is
// reported in ReservedBytes and excluded from UsedBytes, so
// Total = Reserved + Used + Free. With the v1 call (older drivers),
// ReservedBytes is 0 and UsedBytes includes the reservation, so
// Total = Used + Free.
type MemoryInfo struct {
	TotalBytes    uint64 // installed memory visible to the driver
	FreeBytes     uint64 // not allocated by anyone: what a new allocation can get
	UsedBytes     uint64 // allocated by processes (and, without v2, by the driver)
	ReservedBytes uint64 // reserved by the driver; 0 when HasReserved is false
	HasReserved   bool   // the reading came from nvmlDeviceGetMemoryInfo_v2
}

// MemoryReader is anything that reads a GPU's memory; [Device] is one.
// [Monitor] polls a MemoryReader.
type MemoryReader interface {
	MemoryInfo() (MemoryInfo, error)
}

// Device is one GPU as NVML sees it. Its methods are safe for concurrent use.
type Device interface {
	MemoryReader
	// UUID returns the GPU's UUID, e.g. "GPU-8b8c7c8e-…", the identifier
	// that is stable across processes and CUDA_VISIBLE_DEVICES.
	UUID() (string, error)
	// Name returns the product name, e.g. "NVIDIA H100 80GB HBM3".
	Name() (string, error)
}

// Library is the NVML library: initialisation and device lookup. NVML
// enumerates every GPU on the machine regardless of CUDA_VISIBLE_DEVICES,
// so map a rank to its GPU by UUID (or PCI bus id), never by CUDA ordinal.
//
// [NewLibrary] returns the real one; tests substitute fakes. Implementations
// must be safe for concurrent use.
type Library interface {
	// Init loads and initialises NVML. It must succeed before any other
	// method; failures wrap ErrUnavailable when there is no usable driver.
	Init() error
	// Shutdown undoes one successful Init.
	Shutdown() error
	// DeviceCount returns the number of GPUs NVML can see.
	DeviceCount() (int, error)
	// DeviceByIndex returns the GPU with the given NVML index, from 0 to
	// DeviceCount()-1. NVML indices are not CUDA ordinals.
	DeviceByIndex(index int) (Device, error)
	// DeviceByUUID returns the GPU with the given UUID ("GPU-…" or "MIG-…").
	DeviceByUUID(uuid string) (Device, error)
	// DeviceByPCIBusID returns the GPU at the given PCI bus id, in the form
	// "domain:bus:device.function" with hexadecimal fields, e.g.
	// "00000000:3B:00.0" or "0000:3b:00.0".
	DeviceByPCIBusID(busID string) (Device, error)
}

// RefKind says how a [DeviceRef] selects a GPU.
type RefKind int

// The ways to select a GPU. The zero RefKind selects nothing, so that a
// forgotten DeviceRef is an error rather than GPU 0.
const (
	RefByUUID     RefKind = 1 // DeviceRef.ID is a UUID (preferred)
	RefByPCIBusID RefKind = 2 // DeviceRef.ID is a PCI bus id
	RefByIndex    RefKind = 3 // DeviceRef.Index is an NVML index
)

// DeviceRef selects one GPU. Build one with [ByUUID], [ByPCIBusID] or
// [ByIndex].
type DeviceRef struct {
	Kind  RefKind // how to select: RefByUUID, RefByPCIBusID or RefByIndex
	ID    string  // the UUID or PCI bus id, for RefByUUID and RefByPCIBusID
	Index int     // the NVML index, for RefByIndex
}

// ByUUID selects the GPU with the given UUID. This is the preferred way:
// a UUID names the same GPU in every process.
func ByUUID(uuid string) DeviceRef { return DeviceRef{Kind: RefByUUID, ID: uuid} }

// ByPCIBusID selects the GPU at the given PCI bus id ("00000000:3B:00.0").
func ByPCIBusID(busID string) DeviceRef { return DeviceRef{Kind: RefByPCIBusID, ID: busID} }

// ByIndex selects the GPU with the given NVML index. NVML indices ignore
// CUDA_VISIBLE_DEVICES; prefer [ByUUID].
func ByIndex(index int) DeviceRef { return DeviceRef{Kind: RefByIndex, Index: index} }

// String returns the reference as used in error messages, e.g.
// `uuid "GPU-1"`, `pci bus id "00000000:3B:00.0"` or `index 0`.
func (r DeviceRef) String() string {
	switch r.Kind {
	case RefByUUID:
		return "uuid " + strconv.Quote(r.ID)
	case RefByPCIBusID:
		return "pci bus id " + strconv.Quote(r.ID)
	case RefByIndex:
		return "index " + strconv.Itoa(r.Index)
	default:
		return fmt.Sprintf("DeviceRef{Kind: %d}", int(r.Kind))
	}
}

// Validate reports whether r selects a GPU at all: a known Kind, a non-empty
// ID for UUID and PCI references, a non-negative Index for index references.
func (r DeviceRef) Validate() error {
	switch r.Kind {
	case RefByUUID, RefByPCIBusID:
		if r.ID == "" {
			return invalidf("device reference by %s has an empty ID; want a UUID such as \"GPU-…\" or a PCI bus id such as \"00000000:3B:00.0\"", r.kindName())
		}
	case RefByIndex:
		if r.Index < 0 {
			return invalidf("device index %d is negative; want 0 or more", r.Index)
		}
	default:
		return invalidf("device reference kind %d is not one of RefByUUID (1), RefByPCIBusID (2), RefByIndex (3)", int(r.Kind))
	}
	return nil
}

func (r DeviceRef) kindName() string {
	if r.Kind == RefByUUID {
		return "UUID"
	}
	return "PCI bus id"
}

// Lookup returns the GPU of lib that r selects. lib must be initialised.
func Lookup(lib Library, r DeviceRef) (Device, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	switch r.Kind {
	case RefByUUID:
		return lib.DeviceByUUID(r.ID)
	case RefByPCIBusID:
		return lib.DeviceByPCIBusID(r.ID)
	default:
		return lib.DeviceByIndex(r.Index)
	}
}

// MaxDeviceIndex is the largest NVML index ParseDeviceRef accepts. NVML
// takes an unsigned int; bounding it here keeps a huge index from wrapping
// to a real GPU on its way there.
const MaxDeviceIndex = 1<<16 - 1

// ParseDeviceRef parses a device selector as the C and Python front ends
// take it: "uuid:ID", "pci:BUS_ID" or "index:N"; without a prefix, a UUID
// ("GPU-..." or "MIG-..."), a PCI bus id (anything with a ':') or a decimal
// NVML index. Prefer UUIDs: NVML enumerates every GPU whatever
// CUDA_VISIBLE_DEVICES says, so CUDA ordinals and NVML indexes differ.
func ParseDeviceRef(s string) (DeviceRef, error) {
	index := func(v string) (DeviceRef, error) {
		n, err := strconv.Atoi(v)
		if err != nil || v == "" || strings.Trim(v, "0123456789") != "" || n > MaxDeviceIndex {
			return DeviceRef{}, invalidf("device %q: want an NVML index 0..%d (decimal digits)", s, MaxDeviceIndex)
		}
		return ByIndex(n), nil
	}
	var r DeviceRef
	switch {
	case strings.HasPrefix(s, "uuid:"):
		r = ByUUID(s[len("uuid:"):])
	case strings.HasPrefix(s, "pci:"):
		r = ByPCIBusID(s[len("pci:"):])
	case strings.HasPrefix(s, "index:"):
		return index(s[len("index:"):])
	case strings.HasPrefix(s, "GPU-"), strings.HasPrefix(s, "MIG-"):
		r = ByUUID(s)
	case strings.Contains(s, ":"):
		r = ByPCIBusID(s)
	case s != "" && strings.Trim(s, "0123456789") == "":
		return index(s)
	default:
		return DeviceRef{}, invalidf("device %q: want a UUID (GPU-...), a PCI bus id (0000:3b:00.0), an NVML index, or uuid:/pci:/index: followed by one", s)
	}
	if r.ID == "" {
		return DeviceRef{}, invalidf("device %q: empty id after the prefix", s)
	}
	return r, nil
}
