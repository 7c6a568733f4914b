// miniargs 0.4.1 - small string helpers for command-line parsing.
// Copyright (c) 2026 OMP NInfer sample authors. SPDX-License-Identifier: Apache-2.0
#ifndef MINIARGS_HPP
#define MINIARGS_HPP

#include <cstdint>
#include <optional>
#include <string_view>

#define MINIARGS_VERSION "0.4.1"

namespace miniargs {

// True when `arg` looks like an option ("-x", "--name"); a lone "-" is not one.
bool is_option(std::string_view arg) noexcept;

bool starts_with(std::string_view text, std::string_view prefix) noexcept;
bool ends_with(std::string_view text, std::string_view suffix) noexcept;

// Strict base-10 integer: optional leading '-', digits only, no blanks, no '+',
// no trailing characters, and the value must fit in int64_t. Empty on failure.
std::optional<std::int64_t> parse_int(std::string_view text) noexcept;

// parse_int() restricted to [lo, hi].
std::optional<std::int64_t> parse_int_in(std::string_view text, std::int64_t lo,
                                         std::int64_t hi) noexcept;

}  // namespace miniargs

#endif  // MINIARGS_HPP
