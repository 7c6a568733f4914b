// ninfer: the sample stand-in for the NInfer one-shot generation CLI.
#include <cstdio>
#include <string>
#include <string_view>

#include "cli.h"
#include "cuda_util.h"
#include "miniargs.hpp"

namespace {

constexpr std::string_view kName = "ninfer";
constexpr std::string_view kUsage =
    "usage: ninfer <model.ninfer> --prompt TEXT [--max-tokens N] [--max-context N] "
    "[--prefill-chunk N] [--kv-dtype bf16|int8] [--selftest] [--version]\n"
    "\n"
    "Sample stand-in for the NInfer command-line generator (OMP NInfer sample runtime).\n"
    "\n"
    "  --prompt TEXT             prompt to complete (required)\n"
    "  --max-tokens N            tokens to generate (positive, default 128)\n"
    "  --max-context N           maximum context length in tokens (positive)\n"
    "  --prefill-chunk N         prefill chunk in tokens (positive multiple of 128)\n"
    "  --kv-dtype bf16|int8      KV-cache element type (default bf16)\n"
    "  --selftest                run the GPU self-test and exit\n"
    "  --version                 print the build identity and exit\n"
    "  -h, --help                print this help and exit\n";

}  // namespace

int main(int argc, char **argv)
{
    const ninfer::ParsedArgs args = ninfer::parse_args(
        argc, argv,
        {{"--prompt", true}, {"--max-tokens", true}, {"--max-context", true},
         {"--prefill-chunk", true}, {"--kv-dtype", true}});
    if (const int rc = ninfer::dispatch_common_action(args, kName, kUsage); rc >= 0) {
        return rc;
    }
    if (args.positionals.empty()) {
        return ninfer::fail_with_usage(".ninfer model path is required", kUsage);
    }
    if (const int rc = ninfer::reject_malformed(args, 1); rc >= 0) {
        return rc;
    }
    if (!args.has("--prompt")) {
        return ninfer::fail_with_usage("--prompt is required", kUsage);
    }
    if (args.has("--max-tokens") &&
        !miniargs::parse_int_in(args.value("--max-tokens"), 1, 1 << 30).has_value()) {
        return ninfer::fail("--max-tokens must be a positive integer");
    }
    if (const int rc = ninfer::reject_invalid_tuning(args); rc >= 0) {
        return rc;
    }
    const std::string &artifact = args.positionals.front();
    if (!ninfer::is_ninfer_artifact(artifact)) {
        return ninfer::fail("NInfer accepts only .ninfer artifacts");
    }

    std::fprintf(stderr, "ninfer: loading model...\n");
    std::fflush(stderr);
    int devices = 0;
    if (!ninfer::cuda_device_count(devices)) {
        return 1;
    }
    std::FILE *file = std::fopen(artifact.c_str(), "rb");
    if (file == nullptr) {
        return ninfer::fail("cannot open artifact: " + artifact);
    }
    std::fclose(file);
    return ninfer::fail("the sample runtime cannot run models");
}
