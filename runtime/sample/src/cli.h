// Argument parsing shared by ninfer, ninfer-serve and ninfer_bench.
#ifndef NINFER_CLI_H
#define NINFER_CLI_H

#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ninfer {

struct FlagSpec {
    std::string_view name;  // "--port"
    bool takes_value;
};

// What the command line asked for before any per-binary validation.
enum class Action { Run, Help, Version, Selftest };

struct ParsedArgs {
    Action action = Action::Run;
    std::vector<std::string> positionals;
    std::map<std::string, std::string, std::less<>> values;  // last occurrence wins
    std::string unknown_argument;    // first option that is not in the spec
    std::string missing_value_for;   // first option given without its value
    bool has(std::string_view flag) const { return values.find(flag) != values.end(); }
    const std::string &value(std::string_view flag) const { return values.find(flag)->second; }
};

// Parses argv[1..]. "--help"/"-h", "--version" and "--selftest" end parsing as
// soon as they appear in an option position (as argv[1] they always do). Any
// argument that starts with '-' (other than "-") is an option; an option that
// takes a value consumes the next argument whatever it looks like.
ParsedArgs parse_args(int argc, char **argv, std::initializer_list<FlagSpec> flags);

// Prints "error: <message>" on stderr and returns 1.
int fail(std::string_view message);

// Prints "error: <message>" and then the usage on stderr, returns 1.
int fail_with_usage(std::string_view message, std::string_view usage);

// Prints the usage on stdout and returns 0.
int print_usage(std::string_view usage);

// Checks shared by the model-loading binaries; each returns true when valid.
bool valid_max_context(std::string_view text);
bool valid_prefill_chunk(std::string_view text);
bool valid_kv_dtype(std::string_view text);
bool is_ninfer_artifact(std::string_view path);

// Refuses an unknown flag, a flag without its value, or more than
// `max_positionals` positional arguments (in that order); returns 1 after
// printing the error, or -1 when the arguments are well-formed.
int reject_malformed(const ParsedArgs &args, std::size_t max_positionals);

// Checks --prefill-chunk, --max-context and --kv-dtype when given; returns 1
// after printing the first error, or -1 when they are valid.
int reject_invalid_tuning(const ParsedArgs &args);

// Handles Help/Version/Selftest; returns -1 for Action::Run.
int dispatch_common_action(const ParsedArgs &args, std::string_view binary_name,
                           std::string_view usage);

}  // namespace ninfer

#endif  // NINFER_CLI_H
