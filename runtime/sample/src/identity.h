// Build identity shared by every NInfer sample binary.
#ifndef NINFER_IDENTITY_H
#define NINFER_IDENTITY_H

#include <string_view>

namespace ninfer {

// The binary's bytes hold the identity exactly once, as the NUL-terminated
// string "NINFER-BUILD-IDENTITY:v1 <identity_text()>" (see identity.cpp); a tool
// can find the marker in the file and read up to the next NUL. The marker is
// deliberately not spelled anywhere else, so that it occurs only once.

// "upstream_base_sha=... patch_stack_sha=... build_profile=... build_type=...
//  cxx_compiler=... cuda_compiler=... cuda_toolkit=... cuda_architecture=...
//  source_dirty=true|false" (one line, no newline).
std::string_view identity_text() noexcept;

// The architecture this binary carries device code for, e.g. "120a".
std::string_view cuda_architecture() noexcept;

// Prints "<binary_name> <identity_text>\n" on stdout; returns the exit code.
int print_version(std::string_view binary_name);

}  // namespace ninfer

#endif  // NINFER_IDENTITY_H
