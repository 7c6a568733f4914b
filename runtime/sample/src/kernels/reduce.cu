#include "device_math.cuh"
#include "kernels.h"

namespace ninfer::kernels {

namespace {

// Grid-stride accumulation, then a warp-shuffle and shared-memory block reduction.
// warp_sum() is defined in device_math.cu.
__global__ void block_sum_kernel(const float *__restrict__ y, float *__restrict__ partial,
                                 std::size_t n)
{
    __shared__ float warp_totals[kReduceBlock / 32];
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    float sum = 0.0f;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        sum += y[i];
    }
    sum = warp_sum(sum);
    const unsigned lane = threadIdx.x % 32u;
    const unsigned warp = threadIdx.x / 32u;
    if (lane == 0) {
        warp_totals[warp] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        sum = lane < kReduceBlock / 32 ? warp_totals[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) {
            partial[blockIdx.x] = sum;
        }
    }
}

}  // namespace

cudaError_t launch_block_sum(const float *y, float *partial, std::size_t n, int blocks,
                             cudaStream_t stream)
{
    if (blocks <= 0) {
        return cudaErrorInvalidValue;
    }
    block_sum_kernel<<<blocks, kReduceBlock, 0, stream>>>(y, partial, n);
    return cudaGetLastError();
}

}  // namespace ninfer::kernels
