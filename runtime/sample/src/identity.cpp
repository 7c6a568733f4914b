#include "identity.h"

#include <cstdio>

#include "build_config.h"

// The full record lives in the binary's read-only data as one NUL-terminated
// string, so the identity can be read from the file without running it.
#define NINFER_IDENTITY_MARKER "NINFER-BUILD-IDENTITY:v1 "
#define NINFER_IDENTITY_RECORD                                                   \
    NINFER_IDENTITY_MARKER                                                       \
    "upstream_base_sha=" NINFER_UPSTREAM_BASE_SHA                                \
    " patch_stack_sha=" NINFER_PATCH_STACK_SHA                                   \
    " build_profile=" NINFER_BUILD_PROFILE                                       \
    " build_type=" NINFER_BUILD_TYPE                                             \
    " cxx_compiler=" NINFER_CXX_COMPILER                                         \
    " cuda_compiler=" NINFER_CUDA_COMPILER                                       \
    " cuda_toolkit=" NINFER_CUDA_TOOLKIT                                         \
    " cuda_architecture=" NINFER_CUDA_ARCHITECTURE                               \
    " source_dirty=" NINFER_SOURCE_DIRTY

#if defined(__GNUC__) || defined(__clang__)
#define NINFER_KEEP __attribute__((used))
#else
#define NINFER_KEEP
#endif

extern "C" {
// extern "C" + used: neither the compiler nor the linker may drop it, and the
// --version path reads it, which keeps it alive with any toolchain.
extern const char ninfer_build_identity[];
NINFER_KEEP const char ninfer_build_identity[] = NINFER_IDENTITY_RECORD;
}

namespace ninfer {

std::string_view identity_text() noexcept
{
    // Read through a volatile pointer so that the compiler cannot fold the
    // record into separate literals and drop the marker.
    const char *const volatile record = ninfer_build_identity;
    std::string_view text(record);
    // sizeof of a literal emits no second copy of the marker into the binary.
    text.remove_prefix(sizeof(NINFER_IDENTITY_MARKER) - 1);
    return text;
}

std::string_view cuda_architecture() noexcept
{
    return NINFER_CUDA_ARCHITECTURE;
}

int print_version(std::string_view binary_name)
{
    const std::string_view text = identity_text();
    std::fwrite(binary_name.data(), 1, binary_name.size(), stdout);
    std::fputc(' ', stdout);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ninfer

static_assert(sizeof(NINFER_IDENTITY_RECORD) > 25, "identity record is empty");
