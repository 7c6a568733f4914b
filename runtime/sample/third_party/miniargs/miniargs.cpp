// miniargs 0.4.1 - small string helpers for command-line parsing.
// Copyright (c) 2026 OMP NInfer sample authors. SPDX-License-Identifier: Apache-2.0
#include "miniargs.hpp"

#include <limits>

namespace miniargs {

bool is_option(std::string_view arg) noexcept
{
    return arg.size() > 1 && arg.front() == '-';
}

bool starts_with(std::string_view text, std::string_view prefix) noexcept
{
    return text.size() >= prefix.size() && text.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view text, std::string_view suffix) noexcept
{
    return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::optional<std::int64_t> parse_int(std::string_view text) noexcept
{
    bool negative = false;
    if (!text.empty() && text.front() == '-') {
        negative = true;
        text.remove_prefix(1);
    }
    if (text.empty() || text.size() > 19) {
        return std::nullopt;
    }
    // Accumulate as a negative number so that INT64_MIN is representable.
    std::int64_t value = 0;
    constexpr std::int64_t lowest = std::numeric_limits<std::int64_t>::min();
    for (char c : text) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        const int digit = c - '0';
        if (value < (lowest + digit) / 10) {
            return std::nullopt;
        }
        value = value * 10 - digit;
    }
    if (!negative) {
        if (value == lowest) {
            return std::nullopt;
        }
        value = -value;
    }
    return value;
}

std::optional<std::int64_t> parse_int_in(std::string_view text, std::int64_t lo,
                                         std::int64_t hi) noexcept
{
    const auto value = parse_int(text);
    if (!value || *value < lo || *value > hi) {
        return std::nullopt;
    }
    return value;
}

}  // namespace miniargs
