module github.com/adprouter/adprouter

go 1.26

require github.com/NVIDIA/go-nvml v0.13.4-1
