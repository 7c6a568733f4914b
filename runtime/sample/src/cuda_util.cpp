#include "cuda_util.h"

#include <cstdio>

namespace ninfer {

bool cuda_ok(cudaError_t status, std::string_view what)
{
    if (status == cudaSuccess) {
        return true;
    }
    std::fprintf(stderr, "error: %.*s failed: %s: %s\n", static_cast<int>(what.size()),
                 what.data(), cudaGetErrorName(status), cudaGetErrorString(status));
    return false;
}

bool cuda_device_count(int &count)
{
    count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess && count <= 0) {
        status = cudaErrorNoDevice;
    }
    return cuda_ok(status, "cudaGetDeviceCount");
}

}  // namespace ninfer
