// Small CUDA runtime helpers shared by the binaries.
#ifndef NINFER_CUDA_UTIL_H
#define NINFER_CUDA_UTIL_H

#include <string_view>

#include <cuda_runtime_api.h>

namespace ninfer {

// Calls cudaGetDeviceCount(). On failure (or zero devices) prints
// "error: cudaGetDeviceCount failed: <name>: <description>" and returns false.
bool cuda_device_count(int &count);

// When `status` is not cudaSuccess prints
// "error: <what> failed: <name>: <description>" and returns false.
bool cuda_ok(cudaError_t status, std::string_view what);

}  // namespace ninfer

#endif  // NINFER_CUDA_UTIL_H
