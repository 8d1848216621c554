// Sizes and durations as written in the configuration and on the command line
// (config/README.md "Sizes" and "Durations"), and the decimal integers under them.
#include "units.hpp"

#include "sluice/config/settings.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <system_error>

namespace sluice::config {

namespace {

// The leading digits of `text` as a number and the unit after them; nullopt without digits
// or on overflow.
std::optional<std::pair<std::uint64_t, std::string_view>> number_and_unit(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        ++i;
    }
    auto n = parse_u64(text.substr(0, i));
    if (!n) {
        return std::nullopt;
    }
    return std::pair{*n, text.substr(i)};
}

} // namespace

bool is_digits(std::string_view s) noexcept {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<std::uint64_t> parse_u64(std::string_view s) noexcept {
    if (!is_digits(s)) {
        return std::nullopt;
    }
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
        return std::nullopt;
    }
    return v;
}

std::optional<std::size_t> parse_size(std::string_view text) {
    const auto nu = number_and_unit(text);
    if (!nu) {
        return std::nullopt;
    }
    const auto [n, unit] = *nu;
    std::uint64_t mult = 0;
    if (unit.empty() || unit == "B") {
        mult = 1;
    } else if (unit == "KiB") {
        mult = 1ull << 10;
    } else if (unit == "MiB") {
        mult = 1ull << 20;
    } else if (unit == "GiB") {
        mult = 1ull << 30;
    } else if (unit == "TiB") {
        mult = 1ull << 40;
    } else if (unit == "KB" || unit == "kB") {
        mult = 1000;
    } else if (unit == "MB") {
        mult = 1000ull * 1000;
    } else if (unit == "GB") {
        mult = 1000ull * 1000 * 1000;
    } else {
        return std::nullopt;
    }
    if (n > std::numeric_limits<std::size_t>::max() / mult) {
        return std::nullopt;
    }
    return static_cast<std::size_t>(n * mult);
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
    const auto nu = number_and_unit(text);
    if (!nu) {
        return std::nullopt;
    }
    const auto [n, unit] = *nu;
    std::uint64_t mult = 0;
    if (unit == "ms") {
        mult = 1;
    } else if (unit == "s") {
        mult = 1000;
    } else if (unit == "m") {
        mult = 60'000;
    } else if (unit == "h") {
        mult = 3'600'000;
    } else if (unit.empty() && n == 0) {
        return std::chrono::milliseconds{0};
    } else {
        return std::nullopt;
    }
    constexpr auto max =
        static_cast<std::uint64_t>(std::numeric_limits<std::chrono::milliseconds::rep>::max());
    if (n > max / mult) {
        return std::nullopt;
    }
    return std::chrono::milliseconds{static_cast<std::chrono::milliseconds::rep>(n * mult)};
}

} // namespace sluice::config
