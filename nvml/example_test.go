package nvml_test

import (
	"errors"
	"fmt"

	"github.com/adprouter/adprouter/nvml"
)

func ExampleError() {
	// A failed call names the NVML function, the device and NVML's code;
	// classify it with errors.Is.
	err := &nvml.Error{Op: "nvmlDeviceGetMemoryInfo_v2", Device: `uuid "GPU-1"`, Return: 15, Text: "GPU is lost", Err: nvml.ErrGPULost}
	fmt.Println(errors.Is(err, nvml.ErrGPULost))
	fmt.Println(err)
	// Output:
	// true
	// nvml: nvmlDeviceGetMemoryInfo_v2 on uuid "GPU-1": GPU lost (NVML error 15: GPU is lost)
}

func ExampleReadMemory() {
	// On a machine without the NVIDIA driver Init fails with ErrUnavailable
	// and the caller carries on without memory budgets.
	if err := nvml.Init(); err != nil {
		if errors.Is(err, nvml.ErrUnavailable) {
			fmt.Println("no NVML; routing without KV budgets")
			return
		}
		fmt.Println(err)
		return
	}
	defer nvml.Shutdown()
	m, err := nvml.ReadMemory(nvml.ByUUID("GPU-8b8c7c8e-0000-0000-0000-000000000000"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d of %d bytes free\n", m.FreeBytes, m.TotalBytes)
}
