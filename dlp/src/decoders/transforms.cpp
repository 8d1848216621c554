// Text transforms a red-team pass sent a token through (decode.hpp): base32, ascii85,
// byte lists, one separator between every character, uuencode, rot13, and the
// whole-buffer finder more_views() (wide text is in wide.cpp). Each test that decides
// whether a buffer is worth decoding looks at few bytes: the variant pipeline runs it on
// every buffer it scans, and ordinary text must stay as cheap as it was.
#include "views.hpp"

#include "sluice/dlp/decode.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace sluice::dlp::decode {

namespace {

// A decoder's failure: no partial output is left behind.
bool fail(std::string& out) noexcept {
    out.clear();
    return false;
}

int hex_value(unsigned char c) noexcept {
    if (digit(c))
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int base32_value(unsigned char c, bool hex_alphabet) noexcept {
    if (c >= 'a' && c <= 'z')
        c = static_cast<unsigned char>(c - 'a' + 'A');
    if (!hex_alphabet) {
        if (c >= 'A' && c <= 'Z')
            return c - 'A';
        return c >= '2' && c <= '7' ? c - '2' + 26 : -1;
    }
    if (digit(c))
        return c - '0';
    return c >= 'A' && c <= 'V' ? c - 'A' + 10 : -1;
}

// Bytes of a byte list ("0x67, 103; \\x67"), as a table: the samples look at every 32nd
// byte of every buffer the pipeline scans.
constexpr std::array<bool, 256> make_list_bytes() {
    std::array<bool, 256> t{};
    for (const char c : std::string_view("0123456789abcdefABCDEFxX\\,; \t\r\n"))
        t[static_cast<unsigned char>(c)] = true;
    return t;
}
constexpr auto list_bytes = make_list_bytes();

bool list_byte(unsigned char c) noexcept {
    return list_bytes[c];
}

bool list_sep(unsigned char c) noexcept {
    return c == ',' || c == ';' || c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// Quoted-printable outside a MIME part: a soft line break, or two "=HH" octets in a row
// (an encoder that encodes every byte), marks the whitespace-delimited token around it
// (continued across further soft breaks) as worth decoding; ordinary '=' costs a look at
// the two bytes after it.
std::size_t soft_break_end(std::string_view d, std::size_t i) noexcept {
    if (i + 1 < d.size() && d[i + 1] == '\n')
        return i + 2;
    if (i + 2 < d.size() && d[i + 1] == '\r' && d[i + 2] == '\n')
        return i + 3;
    return 0;
}

// The QP token around the '=' at d[i] (see above), unless an earlier one covered it.
void qp_at(std::string_view d, std::size_t i, std::size_t& next, std::size_t limit,
           std::size_t& used, std::vector<text_view>& out, std::size_t first) {
    if (i < next)
        return;
    const bool soft = soft_break_end(d, i) != 0;
    const bool pair = i + 5 < d.size() && hex_value(d[i + 1]) >= 0 && hex_value(d[i + 2]) >= 0 &&
                      d[i + 3] == '=' && hex_value(d[i + 4]) >= 0 && hex_value(d[i + 5]) >= 0;
    if (!soft && !pair)
        return;
    std::size_t b = i;
    while (b > 0 && !blank(d[b - 1]))
        --b;
    std::size_t e = i;
    for (;;) {
        while (e < d.size() && !blank(d[e]) && d[e] != '=')
            ++e;
        if (e >= d.size() || blank(d[e]))
            break;
        const std::size_t after = soft_break_end(d, e);
        e = after != 0 ? after : e + 1;
    }
    next = e;
    text_view v;
    if (!quoted_printable(d.substr(b, e - b), v.bytes) || v.bytes.size() < min_chars ||
        !room(used, limit, v.bytes.size(), out, first))
        return;
    v.step = "qp";
    v.begin = b;
    v.end = e;
    out.push_back(std::move(v));
}

// Byte lists: a sample every 64 bytes; 16 bytes from it all list bytes with 3+
// separators and 6+ digits grow into a region (a 40-character token is 120+ bytes, and
// any list of 80 bytes or more holds a sample).
void list_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& next,
                std::size_t limit, std::size_t& used, std::vector<text_view>& out,
                std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    for (std::size_t s = (from + 63) / 64 * 64; s < to && s + 16 <= n; s += 64) {
        // Four looks reject almost every sample of text.
        // Branch-free: about a third of text bytes are list bytes, so each look would be a
        // coin flip for the branch predictor.
        if (s < next || !(list_bytes[p[s]] & list_bytes[p[s + 5]] & list_bytes[p[s + 10]] &
                          list_bytes[p[s + 15]]))
            continue;
        std::size_t seps = 0, digits = 0;
        bool fits = true;
        for (std::size_t k = s; k < s + 16 && fits; ++k) {
            fits = list_byte(p[k]);
            seps += list_sep(p[k]) ? 1 : 0;
            digits += digit(p[k]) ? 1 : 0;
        }
        if (!fits || seps < 3 || digits < 6)
            continue;
        std::size_t b = s, e = s + 16;
        while (b > 0 && list_byte(p[b - 1]))
            --b;
        while (e < n && list_byte(p[e]))
            ++e;
        next = e;
        // Start at the first value; a word glued before it ("face 103,104") is not one.
        while (b < e && !(digit(p[b]) || p[b] == '\\'))
            ++b;
        text_view v;
        if (!byte_list(d.substr(b, e - b), v.bytes) ||
            !room(used, limit, v.bytes.size(), out, first))
            continue;
        v.step = "bytes";
        v.begin = b;
        v.end = e;
        out.push_back(std::move(v));
    }
}

// Binary digits: a sample every 64 bytes whose 16 bytes are all bits or list separators,
// 12 or more of them bits, grows into a region (a 40-character token is 320 bits, and any
// run of 80 bytes or more holds a sample). '0' and '1' differ in the low bit only.
bool bit_byte(unsigned char c) noexcept {
    return (c & 0xfe) == '0';
}

void bit_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& next,
               std::size_t limit, std::size_t& used, std::vector<text_view>& out,
               std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    for (std::size_t s = (from + 63) / 64 * 64; s < to && s + 16 <= n; s += 64) {
        if (s < next || !(bit_byte(p[s]) | bit_byte(p[s + 1])) ||
            !(bit_byte(p[s + 7]) | bit_byte(p[s + 8])) ||
            !(bit_byte(p[s + 14]) | bit_byte(p[s + 15])))
            continue;
        std::size_t bits = 0;
        bool fits = true;
        for (std::size_t k = s; k < s + 16 && fits; ++k) {
            fits = bit_byte(p[k]) || list_sep(p[k]);
            bits += bit_byte(p[k]) ? 1 : 0;
        }
        if (!fits || bits < 12)
            continue;
        std::size_t b = s, e = s + 16;
        while (b > 0 && (bit_byte(p[b - 1]) || list_sep(p[b - 1])))
            --b;
        while (e < n && (bit_byte(p[e]) || list_sep(p[e])))
            ++e;
        next = e;
        text_view v;
        if (!bit_string(d.substr(b, e - b), v.bytes) ||
            !room(used, limit, v.bytes.size(), out, first))
            continue;
        v.step = "bits";
        v.begin = b;
        v.end = e;
        out.push_back(std::move(v));
    }
}

// One separator between every character: a sample every 32 bytes where four bytes two
// apart are one non-alphanumeric byte grows both ways two bytes at a time.
void spaced_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& next,
                  std::size_t limit, std::size_t& used, std::vector<text_view>& out,
                  std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    for (std::size_t s = (from + 31) / 32 * 32; s < to && s + 9 <= n; s += 32) {
        if (s < next)
            continue;
        // Branch-free first test: one byte repeated two apart, four times, at either phase.
        const bool even = (p[s] == p[s + 2]) & (p[s] == p[s + 4]) & (p[s] == p[s + 6]);
        const bool odd = (p[s + 1] == p[s + 3]) & (p[s + 1] == p[s + 5]) & (p[s + 1] == p[s + 7]);
        if (!(even | odd))
            continue;
        for (std::size_t phase = 0; phase < 2; ++phase) {
            const std::size_t q = s + phase; // a separator
            const unsigned char sep = p[q];
            if (p[q + 2] != sep || alnum(sep) || p[q + 4] != sep || p[q + 6] != sep ||
                p[q + 1] == sep || (p[q + 1] == p[q + 3] && p[q + 3] == p[q + 5]))
                continue;
            std::size_t b = q; // first separator of the streak
            while (b >= 2 && p[b - 2] == sep && p[b - 1] != sep)
                b -= 2;
            std::size_t e = q; // last separator
            while (e + 2 < n && p[e + 2] == sep && p[e + 1] != sep)
                e += 2;
            // The characters around the streak's separators.
            const std::size_t cb = b > 0 && p[b - 1] != sep ? b - 1 : b + 1;
            const std::size_t ce = e + 1 < n && p[e + 1] != sep ? e + 2 : e;
            next = ce;
            text_view v;
            if (!unspace(d.substr(cb, ce - cb), v.bytes) ||
                !room(used, limit, v.bytes.size(), out, first))
                break;
            v.step = "spaced";
            v.begin = cb;
            v.end = ce;
            out.push_back(std::move(v));
            break;
        }
    }
}

// uuencode after "begin NNN " at a line start; ascii85 between "<~" and "~>".
// A uuencoded file whose "begin NNN " line starts at d[i].
void uu_at(std::string_view d, std::size_t i, std::size_t limit, std::size_t& used,
           std::vector<text_view>& out, std::size_t first) {
    if (i + 10 > d.size() || d.compare(i, 6, "begin ") != 0 || !digit(d[i + 6]) ||
        !digit(d[i + 7]) || !digit(d[i + 8]))
        return;
    auto end = d.find("\nend", i);
    end = end == std::string_view::npos ? d.size() : end;
    text_view v;
    if (!uudecode(d.substr(i, end - i), v.bytes) || !room(used, limit, v.bytes.size(), out, first))
        return;
    v.step = "uu";
    v.begin = i;
    v.end = end;
    out.push_back(std::move(v));
}

// Ascii85 from the "<~" at d[i] to the next "~>".
void a85_at(std::string_view d, std::size_t i, std::size_t limit, std::size_t& used,
            std::vector<text_view>& out, std::size_t first) {
    const auto end = d.find("~>", i + 2);
    if (end == std::string_view::npos)
        return;
    text_view v;
    if (!ascii85(d.substr(i, end + 2 - i), v.bytes) ||
        !room(used, limit, v.bytes.size(), out, first))
        return;
    v.step = "ascii85";
    v.begin = i;
    v.end = end + 2;
    out.push_back(std::move(v));
}

// The byte pairs that start a QP token ('=' before a hex digit, CR or LF), a uuencoded
// file ('\n' before 'b') or ascii85 ("<~"), in d[from, to): 16 positions per step with
// SSE2 (the x86-64 baseline) on the bytes and the bytes after them, so ordinary text costs
// a few instructions per 16 bytes rather than a call per line or per '='.
bool pair_trigger(const unsigned char* p) noexcept {
    const unsigned char a = p[0], b = p[1];
    return (a == '=' && (hex_value(b) >= 0 || b == '\r' || b == '\n')) || (a == '\n' && b == 'b') ||
           (a == '<' && b == '~');
}

void trigger_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& qp_next,
                   std::size_t limit, std::size_t& used, std::vector<text_view>& out,
                   std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    const auto visit = [&](std::size_t i) {
        if (p[i] == '=')
            qp_at(d, i, qp_next, limit, used, out, first);
        else if (p[i] == '\n')
            uu_at(d, i + 1, limit, used, out, first);
        else
            a85_at(d, i, limit, used, out, first);
    };
    if (from == 0 && n > 0 && p[0] == 'b')
        uu_at(d, 0, limit, used, out, first);
    std::size_t i = from;
#if defined(__SSE2__)
    const __m128i eq = _mm_set1_epi8('='), nl = _mm_set1_epi8('\n'), lt = _mm_set1_epi8('<');
    const __m128i b_ = _mm_set1_epi8('b'), tilde = _mm_set1_epi8('~');
    for (; i + 17 <= n && i < to; i += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
        const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 1));
        // '=' (its next byte is checked per hit), "\nb", "<~".
        const __m128i m = _mm_or_si128(
            _mm_cmpeq_epi8(v, eq),
            _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi8(v, nl), _mm_cmpeq_epi8(w, b_)),
                         _mm_and_si128(_mm_cmpeq_epi8(v, lt), _mm_cmpeq_epi8(w, tilde))));
        for (auto bits = static_cast<unsigned>(_mm_movemask_epi8(m)); bits != 0; bits &= bits - 1) {
            const std::size_t k = i + static_cast<std::size_t>(__builtin_ctz(bits));
            if (k < to && pair_trigger(p + k))
                visit(k);
        }
    }
#endif
    for (; i < to && i + 1 < n; ++i)
        if (pair_trigger(p + i))
            visit(i);
}

} // namespace

bool base32(std::string_view in, std::string& out, bool hex_alphabet) {
    out.clear();
    std::uint32_t acc = 0;
    int bits = 0;
    std::size_t i = 0;
    for (; i < in.size(); ++i) {
        const auto c = static_cast<unsigned char>(in[i]);
        if (c == '\r' || c == '\n')
            continue;
        if (c == '=')
            break;
        const int v = base32_value(c, hex_alphabet);
        if (v < 0) {
            out.clear();
            return false;
        }
        acc = (acc << 5) | static_cast<std::uint32_t>(v);
        bits += 5;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xffu));
        }
    }
    for (; i < in.size(); ++i)
        if (in[i] != '=' && in[i] != '\r' && in[i] != '\n') {
            out.clear();
            return false;
        }
    return !out.empty();
}

bool ascii85(std::string_view in, std::string& out) {
    out.clear();
    if (in.starts_with("<~"))
        in.remove_prefix(2);
    if (in.ends_with("~>"))
        in.remove_suffix(2);
    std::uint64_t acc = 0;
    int n = 0;
    for (const char ch : in) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\0')
            continue;
        if (c == 'z' && n == 0) {
            out.append(4, '\0');
            continue;
        }
        if (c < '!' || c > 'u')
            return fail(out);
        acc = acc * 85 + (c - '!');
        if (++n == 5) {
            if (acc > 0xffffffffu)
                return fail(out);
            for (int k = 3; k >= 0; --k)
                out.push_back(static_cast<char>((acc >> (8 * k)) & 0xffu));
            acc = 0;
            n = 0;
        }
    }
    if (n == 1)
        return fail(out);
    if (n > 1) {
        // Padded with 'u' (84) to a whole group; n - 1 bytes of it are real.
        for (int k = n; k < 5; ++k)
            acc = acc * 85 + 84;
        if (acc > 0xffffffffu)
            return fail(out);
        for (int k = 0; k < n - 1; ++k)
            out.push_back(static_cast<char>((acc >> (8 * (3 - k))) & 0xffu));
    }
    return !out.empty();
}

bool byte_list(std::string_view in, std::string& out) {
    out.clear();
    std::size_t i = 0;
    const std::size_t n = in.size();
    while (i < n && (in[i] == '[' || in[i] == '{' || in[i] == '(' || list_sep(in[i])))
        ++i;
    while (i < n) {
        unsigned value = 0;
        if (in[i] == '\\' || (in[i] == '0' && i + 1 < n && (in[i + 1] | 0x20) == 'x')) {
            // "\x67" or "0x67": one or two hex digits.
            i += 2;
            int digits = 0;
            while (i < n && digits < 2 && hex_value(in[i]) >= 0) {
                value = value * 16 + static_cast<unsigned>(hex_value(in[i]));
                ++i;
                ++digits;
            }
            if (digits == 0)
                break;
        } else if (digit(in[i])) {
            int digits = 0;
            while (i < n && digit(in[i]) && digits < 4) {
                value = value * 10 + static_cast<unsigned>(in[i] - '0');
                ++i;
                ++digits;
            }
            if (value > 255) {
                out.clear();
                return false;
            }
        } else {
            break;
        }
        out.push_back(static_cast<char>(value));
        while (i < n && list_sep(in[i]))
            ++i;
    }
    if (out.size() < min_chars) {
        out.clear();
        return false;
    }
    return true;
}

bool bit_string(std::string_view in, std::string& out) {
    out.clear();
    std::size_t i = 0;
    const std::size_t n = in.size();
    while (i < n && list_sep(static_cast<unsigned char>(in[i])))
        ++i;
    while (i < n) {
        std::size_t e = i;
        while (e < n && bit_byte(static_cast<unsigned char>(in[e])))
            ++e;
        if (e == i)
            return fail(out); // neither a bit nor a separator
        const std::size_t len = e - i;
        // A group of 7 or 8 is one byte; one longer run is whole octets.
        const std::size_t width = len == 7 ? 7 : 8;
        if (len % width != 0)
            return fail(out);
        for (std::size_t k = i; k < e; k += width) {
            unsigned value = 0;
            for (std::size_t b = k; b < k + width; ++b)
                value = value * 2 + static_cast<unsigned>(in[b] - '0');
            out.push_back(static_cast<char>(value));
        }
        i = e;
        while (i < n && list_sep(static_cast<unsigned char>(in[i])))
            ++i;
    }
    if (out.size() < min_chars)
        return fail(out);
    return true;
}

bool unspace(std::string_view in, std::string& out) {
    out.clear();
    if (in.size() < 2 * min_chars - 1)
        return false;
    const auto sep = static_cast<unsigned char>(in[1]);
    if (alnum(sep))
        return false;
    bool varied = false;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const auto c = static_cast<unsigned char>(in[i]);
        if (i % 2 == 1) {
            if (c != sep) {
                out.clear();
                return false;
            }
            continue;
        }
        if (c == sep) {
            out.clear();
            return false;
        }
        varied = varied || (i > 0 && in[i] != in[i - 2]);
        out.push_back(in[i]);
    }
    if (!varied)
        out.clear();
    return !out.empty();
}

bool uudecode(std::string_view in, std::string& out) {
    out.clear();
    if (in.starts_with("begin ")) {
        const auto nl = in.find('\n');
        if (nl == std::string_view::npos)
            return false;
        in.remove_prefix(nl + 1);
    }
    const auto val = [](char c) { return static_cast<unsigned>(c - ' ') & 63u; };
    while (!in.empty()) {
        auto nl = in.find('\n');
        auto line = in.substr(0, nl);
        in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
        if (line.empty() || line == "end")
            break;
        const unsigned len = val(line[0]);
        if (len == 0)
            break;
        std::string bytes;
        for (std::size_t k = 1; k + 3 < line.size() + 3 && bytes.size() < len; k += 4) {
            unsigned c[4];
            for (std::size_t m = 0; m < 4; ++m)
                c[m] = k + m < line.size() ? val(line[k + m]) : 0;
            const unsigned v = (c[0] << 18) | (c[1] << 12) | (c[2] << 6) | c[3];
            bytes.push_back(static_cast<char>((v >> 16) & 0xff));
            bytes.push_back(static_cast<char>((v >> 8) & 0xff));
            bytes.push_back(static_cast<char>(v & 0xff));
        }
        bytes.resize(std::min<std::size_t>(bytes.size(), len));
        out += bytes;
    }
    return !out.empty();
}

void rot13(std::string_view in, std::string& out) {
    out.resize(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        const char c = in[i];
        if (c >= 'a' && c <= 'z')
            out[i] = static_cast<char>('a' + (c - 'a' + 13) % 26);
        else if (c >= 'A' && c <= 'Z')
            out[i] = static_cast<char>('A' + (c - 'A' + 13) % 26);
        else
            out[i] = c;
    }
}

void more_views(std::string_view data, std::size_t limit, std::vector<text_view>& out) {
    const std::size_t first = out.size();
    std::size_t used = 0;
    wide_views(data, limit, used, out, first);
    // The other finders take the buffer 16 KiB at a time, so that their passes read it
    // from cache, not memory (a region they grow may reach past the block).
    constexpr std::size_t block = 16 << 10;
    std::size_t qp_next = 0, list_next = 0, bit_next = 0, spaced_next = 0, concat_next = 0;
    std::size_t grouped_next = 0;
    for (std::size_t from = 0; from < data.size(); from += block) {
        const std::size_t to = std::min(data.size(), from + block);
        trigger_views(data, from, to, qp_next, limit, used, out, first);
        list_views(data, from, to, list_next, limit, used, out, first);
        bit_views(data, from, to, bit_next, limit, used, out, first);
        spaced_views(data, from, to, spaced_next, limit, used, out, first);
        concat_views(data, from, to, concat_next, limit, used, out, first);
        grouped_views(data, from, to, grouped_next, limit, used, out, first);
    }
}

} // namespace sluice::dlp::decode
