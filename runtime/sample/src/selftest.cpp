#include "selftest.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda_util.h"
#include "identity.h"
#include "kernels/kernels.h"
#include "tinycrc.h"

namespace ninfer {

namespace {

constexpr std::size_t kElements = std::size_t{1} << 20;
constexpr int kSumBlocks = 256;

// Owns one device allocation; freed on every exit path.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    ~DeviceBuffer()
    {
        if (ptr_ != nullptr) {
            static_cast<void>(cudaFree(ptr_));
        }
    }
    bool allocate(std::size_t bytes, const char *what)
    {
        return cuda_ok(cudaMalloc(&ptr_, bytes), what);
    }
    template <typename T> T *as() const { return static_cast<T *>(ptr_); }

private:
    void *ptr_ = nullptr;
};

// Deterministic inputs in [-1, 1): a 32-bit LCG, top 24 bits.
std::vector<float> make_inputs(std::size_t n)
{
    std::vector<float> x(n);
    std::uint32_t state = 0x9E3779B9u;
    for (float &v : x) {
        state = state * 1664525u + 1013904223u;
        v = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
    }
    return x;
}

// Errors that mean "this binary has no code the device can run": no matching
// cubin, and the embedded PTX cannot be JIT-compiled for it. An arch-specific
// target such as 120a carries PTX only for itself; the runtime then reports
// cudaErrorSymbolNotFound (seen on a compute-capability-9.0 GPU) rather than
// cudaErrorNoKernelImageForDevice.
bool is_missing_image(cudaError_t status)
{
    switch (status) {
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorSymbolNotFound:
    case cudaErrorInvalidKernelImage:
    case cudaErrorInvalidPtx:
    case cudaErrorUnsupportedPtxVersion:
        return true;
    default:
        return false;
    }
}

int cannot_run_here(const cudaDeviceProp &prop)
{
    const std::string_view arch = cuda_architecture();
    std::fprintf(stderr,
                 "error: selftest kernel cannot run on device \"%s\" (compute capability %d.%d): "
                 "this binary carries code for cuda_architecture=%.*s\n",
                 prop.name, prop.major, prop.minor, static_cast<int>(arch.size()), arch.data());
    return 1;
}

}  // namespace

int run_selftest()
{
    int count = 0;
    if (!cuda_device_count(count)) {
        return 1;
    }
    const int device = 0;
    if (!cuda_ok(cudaSetDevice(device), "cudaSetDevice")) {
        return 1;
    }
    cudaDeviceProp prop{};
    if (!cuda_ok(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties")) {
        return 1;
    }

    // 1. Probe: can this device run the code in this binary at all?
    DeviceBuffer probe;
    if (!probe.allocate(sizeof(unsigned), "cudaMalloc(probe)")) {
        return 1;
    }
    if (!cuda_ok(cudaMemset(probe.as<void>(), 0, sizeof(unsigned)), "cudaMemset(probe)")) {
        return 1;
    }
    cudaError_t status = kernels::launch_probe(probe.as<unsigned>(), nullptr);
    if (status == cudaSuccess) {
        status = cudaDeviceSynchronize();
    }
    if (is_missing_image(status)) {
        return cannot_run_here(prop);
    }
    if (!cuda_ok(status, "probe kernel")) {
        return 1;
    }
    unsigned magic = 0;
    if (!cuda_ok(cudaMemcpy(&magic, probe.as<void>(), sizeof magic, cudaMemcpyDeviceToHost),
                 "cudaMemcpy(probe)")) {
        return 1;
    }
    if (magic != kernels::kProbeMagic) {
        std::fprintf(stderr, "error: selftest mismatch at element 0: got %u, expected %u\n", magic,
                     kernels::kProbeMagic);
        return 1;
    }

    // 2. Transform through the cross-TU device function, then a block reduction.
    const std::size_t n = kElements;
    const std::vector<float> x = make_inputs(n);
    DeviceBuffer d_x;
    DeviceBuffer d_y;
    DeviceBuffer d_partial;
    if (!d_x.allocate(n * sizeof(float), "cudaMalloc(x)") ||
        !d_y.allocate(n * sizeof(float), "cudaMalloc(y)") ||
        !d_partial.allocate(kSumBlocks * sizeof(float), "cudaMalloc(partial)")) {
        return 1;
    }
    if (!cuda_ok(cudaMemcpy(d_x.as<void>(), x.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                 "cudaMemcpy(x)")) {
        return 1;
    }
    status = kernels::launch_transform(d_x.as<float>(), d_y.as<float>(), n,
                                       kernels::kSelftestScale, kernels::kSelftestBias, nullptr);
    if (is_missing_image(status)) {
        return cannot_run_here(prop);
    }
    if (!cuda_ok(status, "transform kernel launch")) {
        return 1;
    }
    status = kernels::launch_block_sum(d_y.as<float>(), d_partial.as<float>(), n, kSumBlocks,
                                       nullptr);
    if (is_missing_image(status)) {
        return cannot_run_here(prop);
    }
    if (!cuda_ok(status, "block_sum kernel launch") ||
        !cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize") ||
        !cuda_ok(cudaGetLastError(), "cudaGetLastError")) {
        return 1;
    }
    std::vector<float> y(n);
    std::vector<float> partial(kSumBlocks);
    if (!cuda_ok(cudaMemcpy(y.data(), d_y.as<void>(), n * sizeof(float), cudaMemcpyDeviceToHost),
                 "cudaMemcpy(y)") ||
        !cuda_ok(cudaMemcpy(partial.data(), d_partial.as<void>(), kSumBlocks * sizeof(float),
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy(partial)")) {
        return 1;
    }

    // 3. CPU reference. The activation is one fma and a power-of-two scale, so
    //    the GPU should match exactly; allow a few float32 ulps regardless.
    double max_abs_error = 0.0;
    double expected_sum = 0.0;
    double abs_sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        const float expected = kernels::reference_activation(x[i], kernels::kSelftestScale,
                                                             kernels::kSelftestBias);
        const double error = std::fabs(static_cast<double>(y[i]) - expected);
        const double tolerance = 4.0 * 1.1920929e-7 * std::fmax(1.0, std::fabs(expected));
        if (!(error <= tolerance)) {
            std::fprintf(stderr, "error: selftest mismatch at element %zu: got %.9g, expected %.9g\n",
                         i, static_cast<double>(y[i]), static_cast<double>(expected));
            return 1;
        }
        max_abs_error = std::fmax(max_abs_error, error);
        expected_sum += expected;
        abs_sum += std::fabs(expected);
    }
    double got_sum = 0.0;
    for (float p : partial) {
        got_sum += p;
    }
    // float32 accumulation: ~(elements per thread + tree depth) * eps * sum|y|.
    if (!(std::fabs(got_sum - expected_sum) <= 1e-5 * abs_sum + 1e-6)) {
        std::fprintf(stderr, "error: selftest mismatch at element sum: got %.9g, expected %.9g\n",
                     got_sum, expected_sum);
        return 1;
    }

    const std::uint32_t crc = tinycrc32(y.data(), y.size() * sizeof(float));
    const std::string_view arch = cuda_architecture();
    std::printf("selftest: ok device=\"%s\" compute_capability=%d.%d cuda_architecture=%.*s "
                "elements=%zu max_abs_error=%g crc32=%08x\n",
                prop.name, prop.major, prop.minor, static_cast<int>(arch.size()), arch.data(), n,
                max_abs_error, static_cast<unsigned>(crc));
    return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ninfer
