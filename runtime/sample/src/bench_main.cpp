// ninfer_bench: times the sample transform kernel (built only on request).
#include <cstddef>
#include <cstdio>
#include <string_view>

#include <cuda_runtime_api.h>

#include "cli.h"
#include "cuda_util.h"
#include "identity.h"
#include "kernels/kernels.h"
#include "miniargs.hpp"

namespace {

constexpr std::string_view kName = "ninfer_bench";
constexpr std::string_view kUsage =
    "usage: ninfer_bench [--elements N] [--iterations N] [--selftest] [--version]\n"
    "\n"
    "Times the sample transform kernel on device 0 (OMP NInfer sample runtime).\n"
    "\n"
    "  --elements N              float32 elements per launch (default 16777216)\n"
    "  --iterations N            timed launches (default 20)\n"
    "  --selftest                run the GPU self-test and exit\n"
    "  --version                 print the build identity and exit\n"
    "  -h, --help                print this help and exit\n";

int bench(std::size_t n, int iterations)
{
    int devices = 0;
    if (!ninfer::cuda_device_count(devices)) {
        return 1;
    }
    cudaDeviceProp prop{};
    if (!ninfer::cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) {
        return 1;
    }
    float *x = nullptr;
    float *y = nullptr;
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    float total_ms = 0.0f;
    const std::size_t bytes = n * sizeof(float);
    bool ok = ninfer::cuda_ok(cudaMalloc(reinterpret_cast<void **>(&x), bytes), "cudaMalloc(x)") &&
              ninfer::cuda_ok(cudaMalloc(reinterpret_cast<void **>(&y), bytes), "cudaMalloc(y)") &&
              ninfer::cuda_ok(cudaMemset(x, 0, bytes), "cudaMemset(x)") &&
              ninfer::cuda_ok(cudaEventCreate(&start), "cudaEventCreate") &&
              ninfer::cuda_ok(cudaEventCreate(&stop), "cudaEventCreate") &&
              ninfer::cuda_ok(ninfer::kernels::launch_transform(x, y, n, 1.0f, 0.0f, nullptr),
                              "transform kernel launch (warm-up)") &&
              ninfer::cuda_ok(cudaEventRecord(start, nullptr), "cudaEventRecord");
    for (int i = 0; ok && i < iterations; ++i) {
        ok = ninfer::cuda_ok(ninfer::kernels::launch_transform(x, y, n, 1.0f, 0.0f, nullptr),
                             "transform kernel launch");
    }
    ok = ok && ninfer::cuda_ok(cudaEventRecord(stop, nullptr), "cudaEventRecord") &&
         ninfer::cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize") &&
         ninfer::cuda_ok(cudaEventElapsedTime(&total_ms, start, stop), "cudaEventElapsedTime");
    if (ok) {
        const double mean_ms = static_cast<double>(total_ms) / iterations;
        const double gbps = 2.0 * static_cast<double>(n) * sizeof(float) / (mean_ms * 1e6);
        const std::string_view arch = ninfer::cuda_architecture();
        std::printf("bench: device=\"%s\" cuda_architecture=%.*s elements=%zu iterations=%d "
                    "mean_ms=%.4f effective_gbps=%.1f\n",
                    prop.name, static_cast<int>(arch.size()), arch.data(), n, iterations, mean_ms,
                    gbps);
    }
    if (start != nullptr) {
        static_cast<void>(cudaEventDestroy(start));
    }
    if (stop != nullptr) {
        static_cast<void>(cudaEventDestroy(stop));
    }
    static_cast<void>(cudaFree(x));
    static_cast<void>(cudaFree(y));
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv)
{
    const ninfer::ParsedArgs args =
        ninfer::parse_args(argc, argv, {{"--elements", true}, {"--iterations", true}});
    if (const int rc = ninfer::dispatch_common_action(args, kName, kUsage); rc >= 0) {
        return rc;
    }
    if (const int rc = ninfer::reject_malformed(args, 0); rc >= 0) {
        return rc;
    }
    std::size_t elements = std::size_t{1} << 24;
    int iterations = 20;
    if (args.has("--elements")) {
        const auto value = miniargs::parse_int_in(args.value("--elements"), 1, 1LL << 31);
        if (!value) {
            return ninfer::fail("--elements must be in [1,2147483648]");
        }
        elements = static_cast<std::size_t>(*value);
    }
    if (args.has("--iterations")) {
        const auto value = miniargs::parse_int_in(args.value("--iterations"), 1, 100000);
        if (!value) {
            return ninfer::fail("--iterations must be in [1,100000]");
        }
        iterations = static_cast<int>(*value);
    }
    return bench(elements, iterations);
}
