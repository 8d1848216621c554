// The finders of more_views() (decode.hpp) for text that code and people write in pieces:
// string literals joined by '+', and groups of characters between one punctuation byte.
// Each looks at few bytes per buffer byte (views.hpp).
#include "views.hpp"

#include <cstring>

namespace sluice::dlp::decode {

namespace {

// String literals joined by '+' (JavaScript, Python, Java, C#: "ghp_Ohb" + "VrpoiV..."),
// a chain of two or more in one quote character: their contents joined as written (the
// pipeline decodes the view further). A '+' is looked at only with a quote on each side
// (blanks between); base64's '+' costs two byte tests.
bool quote(unsigned char c) noexcept {
    return c == '"' || c == '\'' || c == '`';
}

// The index of the unescaped quote `q` that opens the literal whose closing quote is at
// `close`, at most `reach` bytes back; npos when there is none.
std::size_t literal_open(const unsigned char* p, std::size_t close, unsigned char q) noexcept {
    constexpr std::size_t reach = 4096;
    for (std::size_t j = close; j > 0 && close - j < reach;) {
        --j;
        if (p[j] != q)
            continue;
        std::size_t slashes = 0;
        while (slashes < j && p[j - 1 - slashes] == '\\')
            ++slashes;
        if (slashes % 2 == 0)
            return j;
    }
    return std::string_view::npos;
}

// The closing quote of the literal opened at `open`, before `n`; npos when there is none.
std::size_t literal_close(const unsigned char* p, std::size_t open, std::size_t n) noexcept {
    for (std::size_t j = open + 1; j < n && j - open <= 4096; ++j) {
        if (p[j] == '\\')
            ++j;
        else if (p[j] == p[open])
            return j;
    }
    return std::string_view::npos;
}

} // namespace

void concat_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& next,
                  std::size_t limit, std::size_t& used, std::vector<text_view>& out,
                  std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    for (std::size_t i = std::max(from, next); i < to;) {
        const void* hit = std::memchr(p + i, '+', to - i);
        if (hit == nullptr)
            return;
        const auto k = static_cast<std::size_t>(static_cast<const unsigned char*>(hit) - p);
        i = k + 1;
        std::size_t l = k, r = k + 1;
        while (l > 0 && blank(p[l - 1]))
            --l;
        while (r < n && blank(p[r]))
            ++r;
        if (l == 0 || r >= n || !quote(p[l - 1]) || p[r] != p[l - 1])
            continue;
        const unsigned char q = p[r];
        std::size_t open = literal_open(p, l - 1, q);
        if (open == std::string_view::npos)
            continue;
        text_view v;
        v.begin = open;
        std::size_t parts = 0;
        for (;;) { // a literal at `open`, then blanks, '+', blanks and another, or the end
            const std::size_t close = literal_close(p, open, n);
            if (close == std::string_view::npos)
                break;
            v.bytes.append(d.substr(open + 1, close - open - 1));
            v.end = close + 1;
            ++parts;
            std::size_t j = close + 1;
            while (j < n && blank(p[j]))
                ++j;
            if (j >= n || p[j] != '+')
                break;
            ++j;
            while (j < n && blank(p[j]))
                ++j;
            if (j >= n || p[j] != q)
                break;
            open = j;
        }
        next = i = std::max(i, v.end);
        if (parts < 2 || v.bytes.size() < min_chars ||
            !room(used, limit, v.bytes.size(), out, first))
            continue;
        v.step = "concat";
        out.push_back(std::move(v));
    }
}

namespace {

// One punctuation byte between groups of 2 to 8 characters ("ghp_-OhbV-rpoi-VgRV-...",
// "ghp.Ohb.Vrp.oiV..."): a sample every 16 bytes tries each punctuation byte in its next
// 9 as the separator, the distance to its next copy as the period; four separators a
// period apart grow both ways (the first and last group may be shorter), and the groups
// joined are the view, when they hold both letters and digits. Blanks and quotes are
// never separators (prose and code would fill the views).
bool word_byte(unsigned char c) noexcept {
    return alnum(c) || c == '_';
}

bool group_at(const unsigned char* p, std::size_t at, std::size_t k) noexcept {
    for (std::size_t j = at; j < at + k; ++j)
        if (!word_byte(p[j]))
            return false;
    return true;
}

// The run of groups whose separator is at d[q], when three separators a period apart
// start there; false otherwise.
bool grouped_at(std::string_view d, std::size_t q, std::size_t& next, std::size_t limit,
                std::size_t& used, std::vector<text_view>& out, std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    const unsigned char sep = p[q];
    if (blank(sep) || sep == '"' || sep == '\'' || sep >= 0x80)
        return false;
    std::size_t k = 2;
    while (k <= 8 && q + k + 1 < n && p[q + k + 1] != sep)
        ++k;
    const std::size_t step = k + 1;
    if (k > 8 || q + 3 * step >= n || p[q + step] != sep || p[q + 2 * step] != sep ||
        p[q + 3 * step] != sep || !group_at(p, q + 1, k) || !group_at(p, q + 1 + step, k) ||
        !group_at(p, q + 1 + 2 * step, k))
        return false;
    std::size_t b = q; // first separator of the run
    while (b >= step && p[b - step] == sep && group_at(p, b - k, k))
        b -= step;
    std::size_t e = q + 3 * step; // last separator
    while (e + step < n && p[e + step] == sep && group_at(p, e + 1, k))
        e += step;
    std::size_t cb = b, ce = e + 1;
    while (cb > 0 && b - cb < k && word_byte(p[cb - 1]))
        --cb;
    while (ce < n && ce - e - 1 < k && word_byte(p[ce]))
        ++ce;
    next = ce;
    text_view v;
    bool letter = false, number = false;
    for (std::size_t j = cb; j < ce; ++j)
        if (p[j] != sep) {
            v.bytes.push_back(static_cast<char>(p[j]));
            number = number || digit(p[j]);
            letter = letter || (alnum(p[j]) && !digit(p[j]));
        }
    if (letter && number && room(used, limit, v.bytes.size(), out, first)) {
        v.step = "grouped";
        v.begin = cb;
        v.end = ce;
        out.push_back(std::move(v));
    }
    return true;
}

} // namespace

void grouped_views(std::string_view d, std::size_t from, std::size_t to, std::size_t& next,
                   std::size_t limit, std::size_t& used, std::vector<text_view>& out,
                   std::size_t first) {
    const auto* p = reinterpret_cast<const unsigned char*>(d.data());
    const std::size_t n = d.size();
    // Every 16 bytes, so that a run of 32 bytes or more (a 24-character secret in groups
    // of 2) holds a sample with three separators after it.
    for (std::size_t s = (from + 15) / 16 * 16; s < to && s + 7 < n; s += 16) {
        if (s < next)
            continue;
        for (std::size_t q = s; q < s + 9 && q + 7 < n; ++q)
            if (!word_byte(p[q]) && grouped_at(d, q, next, limit, used, out, first))
                break;
    }
}

} // namespace sluice::dlp::decode
