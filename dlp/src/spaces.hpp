// Internal to dlp/: ASCII white space as the extractors and joined views read it (the C
// locale's isspace(3): space, \t, \n, \r, \f, \v), and the characters of a field label.
// Pure functions.
#pragma once

#include <string_view>

namespace sluice::dlp::spaces {

inline bool is_space(unsigned char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/// A character of a field label (`part1:`, `key=`; seam.hpp): letters, digits, '_', '-'.
inline bool is_label_char(unsigned char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/// `s` without leading and trailing white space.
inline std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && is_space(static_cast<unsigned char>(s.front())))
        s.remove_prefix(1);
    while (!s.empty() && is_space(static_cast<unsigned char>(s.back())))
        s.remove_suffix(1);
    return s;
}

} // namespace sluice::dlp::spaces
