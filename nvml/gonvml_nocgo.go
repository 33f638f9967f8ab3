//go:build !cgo

package nvml

// NewLibrary returns a [Library] whose every method fails with
// ErrUnavailable: go-nvml needs cgo, and this program was built without it
// (CGO_ENABLED=0). The rest of the package (KV shapes, sizing, the guard)
// works without cgo.
func NewLibrary() Library { return noCgoLibrary{} }

type noCgoLibrary struct{}

func errNoCgo(op string) error {
	return &Error{Op: op, Text: "built without cgo (CGO_ENABLED=0); NVML needs cgo", Err: ErrUnavailable}
}

func (noCgoLibrary) Init() error               { return errNoCgo("nvmlInit") }
func (noCgoLibrary) Shutdown() error           { return errNoCgo("nvmlShutdown") }
func (noCgoLibrary) DeviceCount() (int, error) { return 0, errNoCgo("nvmlDeviceGetCount") }
func (noCgoLibrary) DeviceByIndex(int) (Device, error) {
	return nil, errNoCgo("nvmlDeviceGetHandleByIndex")
}
func (noCgoLibrary) DeviceByUUID(string) (Device, error) {
	return nil, errNoCgo("nvmlDeviceGetHandleByUUID")
}
func (noCgoLibrary) DeviceByPCIBusID(string) (Device, error) {
	return nil, errNoCgo("nvmlDeviceGetHandleByPciBusId")
}
