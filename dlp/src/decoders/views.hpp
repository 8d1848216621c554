// What the whole-buffer finders of more_views() (decode.hpp) share: the view budget, the
// byte classes, and the finders of wide.cpp and joins.cpp. Internal to dlp/src/decoders/.
// Not thread safe per call (the counters are the caller's); no shared state.
#pragma once

#include "sluice/dlp/decode.hpp"

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace sluice::dlp::decode {

inline constexpr std::size_t max_views = 64; // views more_views() adds per buffer at most
inline constexpr std::size_t min_chars = 8;  // fewer decoded bytes than any secret's

inline bool digit(unsigned char c) noexcept {
    return c >= '0' && c <= '9';
}

inline bool alnum(unsigned char c) noexcept {
    return digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

inline bool blank(unsigned char c) noexcept {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/// Room left under `limit` decoded bytes (`used` so far) and under max_views views added
/// since index `first` of `out` for a view of `n` bytes; charges `used` when there is.
inline bool room(std::size_t& used, std::size_t limit, std::size_t n, std::vector<text_view>& out,
                 std::size_t first) noexcept {
    if (out.size() - first >= max_views || n > limit - std::min(limit, used))
        return false;
    used += n;
    return true;
}

/// Wide text (wide.cpp), two finders:
/// - the whole buffer as UTF-16/UTF-32 (sniff_wide on its first 4 KiB, converted by ICU),
///   step "utf16le", "utf16be", "utf32le" or "utf32be";
/// - and runs inside other bytes, at any offset and in either byte order (except those
///   the whole-buffer conversion read at their alignment already): at least
///   min_chars printable ASCII characters (0x20-0x7e, tab, CR, LF) each followed by one
///   zero byte (UTF-16, RFC 2781 section 2: ASCII is the code unit's low byte) or three
///   (UTF-32), the characters kept and the zeros dropped. Step "utf16le"/"utf32le" when
///   the run starts with a character, "utf16be"/"utf32be" when a zero byte precedes it. A
///   non-ASCII character ends a run (secrets are ASCII). Only buffers with a NUL byte are
///   looked at (memchr).
void wide_views(std::string_view d, std::size_t limit, std::size_t& used,
                std::vector<text_view>& out, std::size_t first);

/// String literals joined by '+' (joins.cpp): a chain of two or more in one quote
/// character ("ghp_Ohb" + 'V...' in JS, Python, Java), their contents joined as written,
/// step "concat". The buffer is taken [from, to), `next` is where the last view ended.
void concat_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& next,
                  std::size_t limit, std::size_t& used, std::vector<text_view>& out,
                  std::size_t first);

/// Groups of 2 to 8 letters, digits or '_' between one punctuation byte (joins.cpp,
/// "ghp_-OhbV-rpoi-..."), sampled every 16 bytes, joined when they hold letters and
/// digits, step "grouped". Arguments as for concat_views.
void grouped_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& next,
                   std::size_t limit, std::size_t& used, std::vector<text_view>& out,
                   std::size_t first);

} // namespace sluice::dlp::decode
