// Device functions defined in device_math.cu and called from other translation
// units: the sample needs relocatable device code and a device link.
#ifndef NINFER_DEVICE_MATH_CUH
#define NINFER_DEVICE_MATH_CUH

namespace ninfer::kernels {

// Leaky ReLU of fma(scale, x, bias); slope kNegativeSlope below zero.
extern __device__ float sample_activation(float x, float scale, float bias);

// Warp-level sum of `value` over the 32 lanes of a full warp.
extern __device__ float warp_sum(float value);

}  // namespace ninfer::kernels

#endif  // NINFER_DEVICE_MATH_CUH
