// Wide text (views.hpp): the whole buffer as UTF-16/UTF-32 converted by ICU, or runs of
// ASCII in UTF-16/UTF-32 anywhere inside other bytes. The public sniff_wide and
// wide_text are documented in decode.hpp.
#include "views.hpp"

#include "sluice/dlp/decode.hpp"

#include <unicode/ucnv.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace sluice::dlp::decode {

namespace {

// A character of a wide run: printable ASCII, tab, CR or LF.
bool run_char(unsigned char c) noexcept {
    return (c >= 0x20 && c <= 0x7e) || c == '\t' || c == '\r' || c == '\n';
}

// The `k` bytes after `at` are zero, as far as the buffer goes (a big-endian run's last
// character ends the buffer without its zeros after it).
bool zeros_after(const unsigned char* p, std::size_t n, std::size_t at, std::size_t k) noexcept {
    for (std::size_t j = at + 1; j <= at + k && j < n; ++j)
        if (p[j] != 0)
            return false;
    return true;
}

// Where the whole-buffer conversion put ASCII characters: every `unit` bytes from
// `offset` (UTF-16LE: 2 and 0, UTF-16BE: 2 and 1, UTF-32LE: 4 and 0, UTF-32BE: 4 and 3).
// unit 0: the buffer was not converted as a whole.
struct alignment {
    std::size_t unit = 0;
    std::size_t offset = 0;
};

// The whole buffer: a NUL in the first 4 KiB (memchr), then a count of them, before
// sniffing. Says where the conversion (if the buffer sniffed as wide) read characters,
// whether or not its view fit the budget.
alignment whole_buffer(std::string_view d, std::size_t limit, std::size_t& used,
                       std::vector<text_view>& out, std::size_t first) {
    if (d.size() < 32)
        return {};
    // sniff_wide looks at the first 4 KiB only; so does the NUL count that gates it.
    const auto head = d.substr(0, 4096);
    const bool bom = (d[0] == '\xff' && d[1] == '\xfe') || (d[0] == '\xfe' && d[1] == '\xff');
    if (!bom && head.find('\0') == std::string_view::npos)
        return {};
    const auto nuls = static_cast<std::size_t>(std::count(head.begin(), head.end(), '\0'));
    if (!bom && nuls * 4 < head.size())
        return {};
    const char* enc = sniff_wide(d);
    if (!enc)
        return {};
    const bool wide16 = enc[4] == '1', little = enc[6] == 'L';
    const alignment done{wide16 ? 2u : 4u, little ? 0u : (wide16 ? 1u : 3u)};
    text_view v;
    if (!wide_text(d, enc, v.bytes) || !room(used, limit, v.bytes.size(), out, first))
        return done;
    v.step = wide16 ? (little ? "utf16le" : "utf16be") : (little ? "utf32le" : "utf32be");
    v.begin = 0;
    v.end = d.size();
    out.push_back(std::move(v));
    return done;
}

// Runs inside other bytes (views.hpp): from each NUL that follows a run character, back
// to the run's first character and on to its last. A run whose characters sit where the
// whole-buffer conversion read them (`done`) is in that view already; any other run (a
// stray byte shifted it, or it sits in bytes that are not wide text) is a view of its own.
void runs(std::string_view d, alignment done, std::size_t limit, std::size_t& used,
          std::vector<text_view>& out, std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    std::size_t i = 1;
    while (i < n) {
        const auto* z = static_cast<const unsigned char*>(std::memchr(p + i, 0, n - i));
        if (z == nullptr)
            return;
        const auto at = static_cast<std::size_t>(z - p);
        std::size_t k = 1;
        while (at + k < n && k < 4 && p[at + k] == 0)
            ++k;
        if (!run_char(p[at - 1]) || (k != 1 && k != 3)) {
            i = at + k;
            continue;
        }
        const std::size_t unit = k + 1;
        std::size_t b = at - 1;
        while (b >= unit && run_char(p[b - unit]) && zeros_after(p, n, b - unit, k))
            b -= unit;
        text_view v;
        std::size_t e = b;
        for (; e < n && run_char(p[e]) && zeros_after(p, n, e, k); e += unit)
            v.bytes.push_back(static_cast<char>(p[e]));
        e = std::min(e, n);
        i = std::max(e, at + k);
        if (v.bytes.size() < min_chars || (unit == done.unit && b % unit == done.offset) ||
            !room(used, limit, v.bytes.size(), out, first))
            continue;
        const bool be = b > 0 && p[b - 1] == 0;
        v.step = k == 1 ? (be ? "utf16be" : "utf16le") : (be ? "utf32be" : "utf32le");
        v.begin = be ? b - 1 : b;
        v.end = e;
        out.push_back(std::move(v));
    }
}

} // namespace

void wide_views(std::string_view d, std::size_t limit, std::size_t& used,
                std::vector<text_view>& out, std::size_t first) {
    runs(d, whole_buffer(d, limit, used, out, first), limit, used, out, first);
}

const char* sniff_wide(std::string_view in) noexcept {
    if (in.size() < 32)
        return nullptr;
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    if (p[0] == 0xff && p[1] == 0xfe)
        return p[2] == 0 && p[3] == 0 ? "UTF-32LE" : "UTF-16LE";
    if (p[0] == 0 && p[1] == 0 && p[2] == 0xfe && p[3] == 0xff)
        return "UTF-32BE";
    if (p[0] == 0xfe && p[1] == 0xff)
        return "UTF-16BE";
    const std::size_t n = std::min<std::size_t>(in.size(), 4096) & ~std::size_t{3};
    std::array<std::size_t, 4> z{};
    for (std::size_t i = 0; i < n; ++i)
        z[i & 3] += p[i] == 0 ? 1 : 0;
    const std::size_t units = n / 4;
    const auto hi = [&](std::size_t k) { return z[k] * 4 >= units * 3; };
    const auto lo = [&](std::size_t k) { return z[k] * 4 <= units; };
    if (lo(0) && hi(1) && hi(2) && hi(3))
        return "UTF-32LE";
    if (hi(0) && hi(1) && hi(2) && lo(3))
        return "UTF-32BE";
    if (lo(0) && hi(1) && lo(2) && hi(3))
        return "UTF-16LE";
    if (hi(0) && lo(1) && hi(2) && lo(3))
        return "UTF-16BE";
    return nullptr;
}

bool wide_text(std::string_view in, const char* encoding, std::string& out) {
    out.clear();
    if (in.empty())
        return false;
    // UTF-8 needs at most 3 bytes per UTF-16 unit (4 per surrogate pair), at most 4 per
    // UTF-32 unit, plus room for the terminating NUL ucnv_convert writes.
    out.resize(in.size() * 2 + 4);
    UErrorCode st = U_ZERO_ERROR;
    const auto len = ucnv_convert("UTF-8", encoding, out.data(), static_cast<int32_t>(out.size()),
                                  in.data(), static_cast<int32_t>(in.size()), &st);
    if (U_FAILURE(st) || len <= 0) {
        out.clear();
        return false;
    }
    out.resize(static_cast<std::size_t>(len));
    // A byte-order mark converts to U+FEFF (EF BB BF): not part of the text.
    if (out.starts_with("\xef\xbb\xbf"))
        out.erase(0, 3);
    return !out.empty();
}

} // namespace sluice::dlp::decode
