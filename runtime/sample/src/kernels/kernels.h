// Host entry points of the sample kernels (src/kernels/*.cu).
#ifndef NINFER_KERNELS_H
#define NINFER_KERNELS_H

#include <cstddef>

#include <cuda_runtime_api.h>

namespace ninfer::kernels {

inline constexpr float kSelftestScale = 1.5f;
inline constexpr float kSelftestBias = -0.25f;
inline constexpr float kNegativeSlope = 0.0625f;
inline constexpr unsigned kProbeMagic = 0x4E494E46u;  // "NINF"
inline constexpr int kReduceBlock = 256;

// Writes kProbeMagic to *out with one thread; returns the launch error.
cudaError_t launch_probe(unsigned *out, cudaStream_t stream);

// y[i] = activation(scale * x[i] + bias) for i < n; returns the launch error.
cudaError_t launch_transform(const float *x, float *y, std::size_t n, float scale, float bias,
                             cudaStream_t stream);

// partial[b] = sum of the elements that block b visits; `blocks` entries are
// written. Returns the launch error.
cudaError_t launch_block_sum(const float *y, float *partial, std::size_t n, int blocks,
                             cudaStream_t stream);

// CPU reference of the device activation.
float reference_activation(float x, float scale, float bias);

}  // namespace ninfer::kernels

#endif  // NINFER_KERNELS_H
