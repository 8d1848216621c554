// Internal to dlp/, included by variant_candidates.cpp and variant_runs.cpp (each its own
// copy: an anonymous namespace; inline, so a file that uses some is not warned), after
// candidate_classes.hpp: the runs a candidate spans once its first byte is known (an
// alphabet run, line breaks, the stops of a region, groups of base64 or hex split by
// spaces or line breaks), SSE2 sixteen bytes at a time where it helps.
#pragma once

#include "candidate_classes.hpp"

#include <cstring>

namespace sluice::dlp {

namespace {

// The run of base64-alphabet bytes starting at d[i]: where it ends, whether it is all hex
// digits and whether it holds a '/', '-' or '_'. Sixteen bytes per step: one byte at a
// time, this was a tenth of the candidate pass.
struct alphabet_run {
    std::size_t end = 0;
    bool all_hex = true;
    bool has_sep = false;
};

inline alphabet_run scan_alphabet_run(const unsigned char* d, std::size_t i,
                                      std::size_t n) noexcept {
    alphabet_run r;
    std::size_t j = i;
#if defined(__SSE2__)
    for (; j + 16 <= n; j += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + j));
        const __m128i lower = _mm_or_si128(v, _mm_set1_epi8(0x20));
        const __m128i digit = in_range(v, '0', '9');
        const __m128i sep = _mm_or_si128(_mm_or_si128(eq(v, '/'), eq(v, '-')), eq(v, '_'));
        const __m128i b64 = _mm_or_si128(_mm_or_si128(digit, in_range(lower, 'a', 'z')),
                                         _mm_or_si128(sep, eq(v, '+')));
        const __m128i hexd = _mm_or_si128(digit, in_range(lower, 'a', 'f'));
        const unsigned stop = ~static_cast<unsigned>(_mm_movemask_epi8(b64)) & 0xFFFFu;
        const unsigned valid = stop != 0 ? (1u << __builtin_ctz(stop)) - 1 : 0xFFFFu;
        r.all_hex = r.all_hex && (static_cast<unsigned>(_mm_movemask_epi8(hexd)) & valid) == valid;
        r.has_sep = r.has_sep || (static_cast<unsigned>(_mm_movemask_epi8(sep)) & valid) != 0;
        if (stop != 0) {
            r.end = j + static_cast<unsigned>(__builtin_ctz(stop));
            return r;
        }
    }
#endif
    for (; j < n && (cls[d[j]] & k_b64); ++j) {
        r.all_hex = r.all_hex && is_hex(d[j]);
        r.has_sep = r.has_sep || d[j] == '/' || d[j] == '-' || d[j] == '_';
    }
    r.end = j;
    return r;
}

// The first byte at or after `e` where a region scan has to look: a delimiter of escape
// regions (is_escape_delim) or a '\\' when `esc`, else a delimiter of percent and entity
// regions (is_token_delim). Sixteen bytes per step; regions run to the end of a string
// literal or token.
// The end of a line break at d[j]: CR, LF or CRLF, or the same written as JSON/JS string
// escapes ("\r\n", "\n": a wrapped base64 blob inside a string literal); j when there is
// none. A backslash is in neither base64 alphabet, so an escape is never run data.
inline std::size_t line_break_end(const unsigned char* d, std::size_t j, std::size_t n) noexcept {
    auto take = [&](unsigned char raw, unsigned char escaped) {
        if (j < n && d[j] == raw)
            ++j;
        else if (j + 1 < n && d[j] == '\\' && d[j + 1] == escaped)
            j += 2;
    };
    take('\r', 'r');
    take('\n', 'n');
    return j;
}

inline std::size_t next_region_stop(const unsigned char* d, std::size_t e, std::size_t n,
                                    bool esc) noexcept {
#if defined(__SSE2__)
    for (; e + 16 <= n; e += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + e));
        const __m128i quotes =
            _mm_or_si128(_mm_or_si128(eq(v, '"'), eq(v, '\'')),
                         _mm_or_si128(_mm_or_si128(eq(v, '<'), eq(v, '>')), eq(v, '`')));
        const __m128i rest = esc ? _mm_or_si128(_mm_or_si128(eq(v, '\n'), eq(v, '\r')), eq(v, '\\'))
                                 : _mm_or_si128(eq(v, ' '), in_range(v, '\t', '\r'));
        const unsigned stop = static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(quotes, rest)));
        if (stop != 0)
            return e + static_cast<unsigned>(__builtin_ctz(stop));
    }
#endif
    for (; e < n; ++e)
        if (esc ? is_escape_delim(d[e]) || d[e] == '\\' : is_token_delim(d[e]))
            break;
    return e;
}

// The first '/', '-', '_', CR or LF in [q, j), else j: where a piece of a run split at its
// separators ends. Sixteen bytes per step (reads stay below n).
inline std::size_t next_piece_end(const unsigned char* d, std::size_t q, std::size_t j,
                                  std::size_t n) noexcept {
#if defined(__SSE2__)
    for (; q < j && q + 16 <= n; q += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + q));
        const __m128i sep =
            _mm_or_si128(_mm_or_si128(eq(v, '/'), eq(v, '-')),
                         _mm_or_si128(_mm_or_si128(eq(v, '_'), eq(v, '\n')), eq(v, '\r')));
        const unsigned m = static_cast<unsigned>(_mm_movemask_epi8(sep));
        if (m != 0)
            return std::min(j, q + static_cast<unsigned>(__builtin_ctz(m)));
    }
#endif
    while (q < j && d[q] != '/' && d[q] != '-' && d[q] != '_' && d[q] != '\n' && d[q] != '\r')
        ++q;
    return std::min(q, j);
}

// The base64 characters in [a, b) as decode::base64 counts them when it starts before a:
// bytes of either alphabet, not line breaks and not the letter of a line break written as
// a string escape ("\\r\\n"). Judged byte by byte (d[a - 1] is read), so counts of
// adjacent ranges add up whatever splits them, an escape included.
inline std::size_t b64_chars(const unsigned char* d, std::size_t a, std::size_t b) noexcept {
    std::size_t c = 0;
    for (std::size_t x = a; x < b; ++x) {
        const bool escaped = x > 0 && d[x - 1] == '\\' && (d[x] == 'r' || d[x] == 'n');
        c += (cls[d[x]] & k_b64) != 0 && !escaped ? 1 : 0;
    }
    return c;
}

// Runs of equal groups of base64-alphabet bytes (and '=' at the very end), 4 to 76
// bytes each, separated by spaces, tabs, LF or CRLF, the last group possibly shorter: two
// groups or more and 24 alphabet bytes or more. Calls on_span(begin, end) for each.
// Separators are found 16 bytes at a time; the per-group work only runs at separators,
// and the alphabet test only for a run of equal lengths (ordinary words rarely line up).
template <class OnSpan>
void spaced_groups(const unsigned char* d, std::size_t n, OnSpan&& on_span) {
    constexpr std::size_t min_group = 4;
    constexpr std::size_t max_group = 76;
    std::size_t group_len = 0; // the streak's group length
    std::size_t groups = 0;    // full groups in the streak
    std::size_t start = 0;     // first byte of the streak
    std::size_t last_end = 0;  // end of the streak's last full group
    std::size_t gbegin = 0;    // first byte of the current group
    // The streak ends before the group [gb, ge), which may be its shorter last group.
    const auto close = [&](std::size_t gb, std::size_t ge) {
        if (groups == 0)
            return;
        std::size_t end = last_end;
        std::size_t total = groups * group_len;
        // A shorter last group, unless the last full one ended in padding.
        if (ge > gb && ge - gb < group_len && d[last_end - 1] != '=') {
            end = ge;
            total += ge - gb;
        }
        // Two groups at least; one full group and a shorter one only at a line width
        // (two words of 12 and 13 letters are common, a 20-letter word is not).
        if (total < 24 || (groups == 1 && (end == last_end || group_len < 20)))
            return;
        // Alphabet bytes and separators only; '=' (padding) only in the last 2 bytes.
        for (std::size_t k = start; k < end; ++k) {
            const unsigned char ch = d[k];
            if (!(cls[ch] & k_b64) && ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r' &&
                !(ch == '=' && k + 2 >= end)) {
                if (end == last_end || k < last_end)
                    return;
                end = last_end; // the last group is not part of it
                break;
            }
        }
        on_span(start, end);
    };
    const auto at_separator = [&](std::size_t k) {
        std::size_t ge = k;
        if (d[k] == '\n' && ge > gbegin && d[ge - 1] == '\r')
            --ge;
        const std::size_t len = ge - gbegin;
        const bool blank_line = d[k] == '\n' && ge > 0 && d[ge - 1] == '\n';
        if (len == 0 && groups > 0 && !blank_line) {
            // Two or more spaces between groups ("Z2hw  X2Fi"), a space before a line
            // break, indented lines: one separator. A blank line ends the streak.
            gbegin = k + 1;
            return;
        }
        if (groups > 0 && len == group_len) {
            ++groups;
            last_end = ge;
        } else {
            close(gbegin, ge);
            group_len = len;
            groups = len >= min_group && len <= max_group ? 1 : 0;
            start = gbegin;
            last_end = ge;
        }
        gbegin = k + 1;
    };
    std::size_t k = 0;
#if defined(__SSE2__)
    for (; k + 16 <= n; k += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + k));
        unsigned m = static_cast<unsigned>(
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(eq(v, ' '), eq(v, '\t')), eq(v, '\n'))));
        while (m != 0) {
            at_separator(k + static_cast<unsigned>(__builtin_ctz(m)));
            m &= m - 1;
        }
    }
#endif
    for (; k < n; ++k)
        if (d[k] == ' ' || d[k] == '\t' || d[k] == '\n')
            at_separator(k);
    if (groups > 0 && n - gbegin == group_len) {
        ++groups;
        last_end = n;
    }
    close(gbegin, n);
}

// Where spaced_groups() can find something: around each aligned 16-byte block made only
// of base64-alphabet bytes, '=' and separators, holding a separator and 5 or more
// capitals or digits (prose and JSON rarely are; spaced base64 of 24+ characters always
// covers such a block). Regions are the blocks plus 96 bytes either side, merged; the
// per-separator work runs only there.
template <class OnSpan>
void spaced_regions(const unsigned char* d, std::size_t n, OnSpan&& on_span) {
    constexpr std::size_t margin = 96;
    std::size_t rb = npos;
    std::size_t re = 0;
    const auto flush = [&] {
        if (rb != npos)
            spaced_groups(d + rb, re - rb,
                          [&](std::size_t b, std::size_t e) { on_span(rb + b, rb + e); });
    };
    const auto interesting = [&](std::size_t k) {
        const std::size_t b = k > margin ? k - margin : 0;
        const std::size_t e = std::min(n, k + 16 + margin);
        if (rb != npos && b <= re) {
            re = e;
            return;
        }
        flush();
        rb = b;
        re = e;
    };
#if defined(__SSE2__)
    for (std::size_t k = 0; k + 16 <= n; k += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + k));
        const __m128i strong = _mm_or_si128(in_range(v, 'A', 'Z'), in_range(v, '0', '9'));
        const unsigned sm = static_cast<unsigned>(_mm_movemask_epi8(strong));
        if (__builtin_popcount(sm) < 5)
            continue;
        const __m128i sep = _mm_or_si128(_mm_or_si128(eq(v, ' '), eq(v, '\t')),
                                         _mm_or_si128(eq(v, '\n'), eq(v, '\r')));
        const __m128i ok = _mm_or_si128(
            _mm_or_si128(_mm_or_si128(strong, in_range(v, 'a', 'z')), sep),
            _mm_or_si128(_mm_or_si128(eq(v, '+'), eq(v, '/')),
                         _mm_or_si128(_mm_or_si128(eq(v, '-'), eq(v, '_')), eq(v, '='))));
        if (_mm_movemask_epi8(ok) == 0xFFFF && _mm_movemask_epi8(sep) != 0)
            interesting(k);
    }
#else
    for (std::size_t k = 0; k + 16 <= n; k += 16)
        interesting(k);
#endif
    flush();
}

// Where to decode a long base64 run whose start decodes to binary, as an offset into
// `run` (0-3). A word glued before the base64 ("upl" + base64 of a file) shifts every
// later quantum, and decoding from the run's start turns the file into noise:
// - a padded run (RFC 4648 section 4: a whole number of 4-character quanta) starts its
//   base64 at its number of characters (line breaks not counted) mod 4;
// - else the first alignment whose first 12 bytes start a compressed stream that
//   sniffed() opens (decode::starts_compressed);
// - else the run's start (a run may end in other bytes of the alphabet, "--boundary").
inline std::size_t binary_alignment(std::string_view run) noexcept {
    if (run.ends_with('=')) {
        std::size_t chars = 0; // line breaks of wrapped base64 are not characters
        for (const char ch : run)
            chars += ch != '\r' && ch != '\n' && ch != ' ' && ch != '\t';
        return chars % 4;
    }
    for (std::size_t k = 0; k < 4 && k + 16 <= run.size(); ++k)
        if (shifted_compressed_b64(reinterpret_cast<const unsigned char*>(run.data() + k)))
            return k;
    return 0;
}

} // namespace

} // namespace sluice::dlp
