#include <cmath>

#include "device_math.cuh"
#include "kernels.h"

namespace ninfer::kernels {

__device__ float sample_activation(float x, float scale, float bias)
{
    const float t = fmaf(scale, x, bias);
    return t > 0.0f ? t : kNegativeSlope * t;
}

__device__ float warp_sum(float value)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        value += __shfl_down_sync(0xFFFFFFFFu, value, offset);
    }
    return value;
}

float reference_activation(float x, float scale, float bias)
{
    const float t = std::fma(scale, x, bias);
    return t > 0.0f ? t : kNegativeSlope * t;
}

}  // namespace ninfer::kernels
