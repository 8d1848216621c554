// Units the configuration and the command line share (internal to config/): decimal
// integers. Sizes and durations themselves are public (`parse_size`, `parse_duration` in
// sluice/config/settings.hpp) and defined in units.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::config {

/// True for one or more ASCII digits and nothing else.
bool is_digits(std::string_view s) noexcept;
/// A non-negative decimal integer (digits only, no sign or space); nullopt if not one or
/// over 2^64-1.
std::optional<std::uint64_t> parse_u64(std::string_view s) noexcept;

} // namespace sluice::config
