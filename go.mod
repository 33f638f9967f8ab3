module github.com/adprouter/adprouter

go 1.26

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
)
