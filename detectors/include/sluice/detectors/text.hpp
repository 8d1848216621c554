// Small ASCII text helpers shared by every module (detectors is the lowest one, so
// dlp, config, proxy and the CLI may all include this). Header-only, no allocation beyond
// the returned strings, no locale: every function treats bytes >= 0x80 as opaque.
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <type_traits>

namespace sluice::text {

/// Lower-case hexadecimal digits, indexed by a nibble (0..15).
inline constexpr char hex_lower[] = "0123456789abcdef";
/// Upper-case hexadecimal digits, indexed by a nibble (0..15).
inline constexpr char hex_upper[] = "0123456789ABCDEF";

/// Appends two hex digits per byte of `bytes` (lower case unless `upper`) to `out`.
inline void append_hex(std::string& out, std::string_view bytes, bool upper = false) {
    const char* digits = upper ? hex_upper : hex_lower;
    out.reserve(out.size() + bytes.size() * 2);
    for (unsigned char c : bytes) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 0xf]);
    }
}

/// `bytes` as hex, two digits per byte (lower case unless `upper`).
inline std::string to_hex(std::string_view bytes, bool upper = false) {
    std::string out;
    append_hex(out, bytes, upper);
    return out;
}

/// 'A'..'Z' to 'a'..'z'; every other byte unchanged.
constexpr char ascii_lower(char c) noexcept {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

/// `s` with 'A'..'Z' lowered (ASCII only).
inline std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), ascii_lower);
    return out;
}

/// ASCII case-insensitive equality (field names, schemes, tokens).
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (ascii_lower(a[i]) != ascii_lower(b[i])) {
            return false;
        }
    }
    return true;
}

/// `s` without leading and trailing spaces and tabs (HTTP optional whitespace, RFC 9110
/// section 5.6.3).
constexpr std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

/// Concatenates strings, string views, characters arrays and numbers (std::to_string) into
/// one string: g++ 12 has no <format>.
template <class... Parts>
std::string str_cat(const Parts&... parts) {
    std::string out;
    auto add = [&out](const auto& p) {
        if constexpr (std::is_arithmetic_v<std::decay_t<decltype(p)>>) {
            out += std::to_string(p);
        } else {
            out += std::string_view(p);
        }
    };
    (add(parts), ...);
    return out;
}

} // namespace sluice::text
