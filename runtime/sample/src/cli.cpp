#include "cli.h"

#include <cstdint>
#include <cstdio>

#include "miniargs.hpp"
#include "identity.h"
#include "selftest.h"

namespace ninfer {

ParsedArgs parse_args(int argc, char **argv, std::initializer_list<FlagSpec> flags)
{
    ParsedArgs parsed;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (!miniargs::is_option(arg)) {
            parsed.positionals.emplace_back(arg);
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            parsed.action = Action::Help;
            return parsed;
        }
        if (arg == "--version") {
            parsed.action = Action::Version;
            return parsed;
        }
        if (arg == "--selftest") {
            parsed.action = Action::Selftest;
            return parsed;
        }
        const FlagSpec *spec = nullptr;
        for (const FlagSpec &candidate : flags) {
            if (candidate.name == arg) {
                spec = &candidate;
                break;
            }
        }
        if (spec == nullptr) {
            if (parsed.unknown_argument.empty()) {
                parsed.unknown_argument = std::string(arg);
            }
            continue;
        }
        if (!spec->takes_value) {
            parsed.values.insert_or_assign(std::string(arg), std::string());
            continue;
        }
        if (i + 1 >= argc) {
            if (parsed.missing_value_for.empty()) {
                parsed.missing_value_for = std::string(arg);
            }
            continue;
        }
        parsed.values.insert_or_assign(std::string(arg), std::string(argv[++i]));
    }
    return parsed;
}

int fail(std::string_view message)
{
    std::fprintf(stderr, "error: %.*s\n", static_cast<int>(message.size()), message.data());
    return 1;
}

int fail_with_usage(std::string_view message, std::string_view usage)
{
    fail(message);
    std::fwrite(usage.data(), 1, usage.size(), stderr);
    return 1;
}

int print_usage(std::string_view usage)
{
    std::fwrite(usage.data(), 1, usage.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
}

bool valid_max_context(std::string_view text)
{
    return miniargs::parse_int_in(text, 1, INT32_MAX).has_value();
}

bool valid_prefill_chunk(std::string_view text)
{
    const auto value = miniargs::parse_int_in(text, 1, INT32_MAX);
    return value && *value % 128 == 0;
}

bool valid_kv_dtype(std::string_view text)
{
    return text == "bf16" || text == "int8";
}

bool is_ninfer_artifact(std::string_view path)
{
    return path.size() > 7 && miniargs::ends_with(path, ".ninfer");
}

int reject_malformed(const ParsedArgs &args, std::size_t max_positionals)
{
    if (!args.unknown_argument.empty()) {
        return fail("unknown argument: " + args.unknown_argument);
    }
    if (!args.missing_value_for.empty()) {
        return fail("missing value for " + args.missing_value_for);
    }
    if (args.positionals.size() > max_positionals) {
        return fail("unexpected argument: " + args.positionals[max_positionals]);
    }
    return -1;
}

int reject_invalid_tuning(const ParsedArgs &args)
{
    if (args.has("--prefill-chunk") && !valid_prefill_chunk(args.value("--prefill-chunk"))) {
        return fail("--prefill-chunk must be a positive multiple of 128");
    }
    if (args.has("--max-context") && !valid_max_context(args.value("--max-context"))) {
        return fail("--max-context must be a positive integer");
    }
    if (args.has("--kv-dtype") && !valid_kv_dtype(args.value("--kv-dtype"))) {
        return fail("--kv-dtype must be bf16 or int8");
    }
    return -1;
}

int dispatch_common_action(const ParsedArgs &args, std::string_view binary_name,
                           std::string_view usage)
{
    switch (args.action) {
    case Action::Help:
        return print_usage(usage);
    case Action::Version:
        return print_version(binary_name);
    case Action::Selftest:
        return run_selftest();
    case Action::Run:
        break;
    }
    return -1;
}

}  // namespace ninfer
