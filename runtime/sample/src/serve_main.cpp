// ninfer-serve: the sample stand-in for the NInfer HTTP model server.
#include <cstdio>
#include <string>
#include <string_view>

#include "cli.h"
#include "cuda_util.h"
#include "miniargs.hpp"
#include "net.h"

namespace {

constexpr std::string_view kName = "ninfer-serve";
constexpr std::string_view kUsage =
    "usage: ninfer-serve <model.ninfer> [--host H] [--port N] [--api-key-file FILE] "
    "[--model-id ID] [--max-context N] [--prefill-chunk N] [--kv-dtype bf16|int8] "
    "[--deployment-profile ID] [--selftest] [--version]\n"
    "\n"
    "Sample stand-in for the NInfer model server (OMP NInfer sample runtime).\n"
    "\n"
    "  --host H                  address to listen on (default 127.0.0.1)\n"
    "  --port N                  TCP port in [1,65535] (default 8080)\n"
    "  --api-key-file FILE       file holding the API key clients must present\n"
    "  --model-id ID             model name reported to clients\n"
    "  --max-context N           maximum context length in tokens (positive)\n"
    "  --prefill-chunk N         prefill chunk in tokens (positive multiple of 128)\n"
    "  --kv-dtype bf16|int8      KV-cache element type (default bf16)\n"
    "  --deployment-profile ID   deployment profile name\n"
    "  --selftest                run the GPU self-test and exit\n"
    "  --version                 print the build identity and exit\n"
    "  -h, --help                print this help and exit\n";

}  // namespace

int main(int argc, char **argv)
{
    const ninfer::ParsedArgs args = ninfer::parse_args(
        argc, argv,
        {{"--host", true}, {"--port", true}, {"--api-key-file", true}, {"--model-id", true},
         {"--max-context", true}, {"--prefill-chunk", true}, {"--kv-dtype", true},
         {"--deployment-profile", true}});
    if (const int rc = ninfer::dispatch_common_action(args, kName, kUsage); rc >= 0) {
        return rc;
    }
    if (args.positionals.empty()) {
        return ninfer::fail_with_usage("artifact path is required", kUsage);
    }
    if (const int rc = ninfer::reject_malformed(args, 1); rc >= 0) {
        return rc;
    }
    int port = 8080;
    if (args.has("--port")) {
        const auto value = miniargs::parse_int_in(args.value("--port"), 1, 65535);
        if (!value) {
            return ninfer::fail("--port must be in [1,65535]");
        }
        port = static_cast<int>(*value);
    }
    if (const int rc = ninfer::reject_invalid_tuning(args); rc >= 0) {
        return rc;
    }
    const std::string &artifact = args.positionals.front();
    if (!ninfer::is_ninfer_artifact(artifact)) {
        return ninfer::fail("NInfer accepts only .ninfer artifacts");
    }
    const std::string host = args.has("--host") ? args.value("--host") : "127.0.0.1";

    // Claim the listening socket before touching the GPU, like the real server.
    ninfer::Listener listener;
    if (!listener.bind_and_listen(host, port)) {
        return ninfer::fail("failed to bind " + host + ":" + std::to_string(port));
    }

    std::fprintf(stderr, "ninfer-serve: loading model...\n");
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
    return ninfer::fail("the sample runtime cannot serve models");
}
