// The search for compressed streams that start after other bytes (decode.hpp
// embedded_offsets, first_embedded, magic_offsets): a 16-byte SIMD pass on the first
// bytes of each format's header, then the full check (magic.hpp) at the positions it
// leaves, and for zlib and .lzma, which text and binary can resemble, a probe that
// decodes the first bytes.
#include "magic.hpp"

#include <zlib.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>

namespace sluice::dlp::decode {

std::vector<std::size_t> magic_offsets(std::string_view data, std::size_t max) {
    std::vector<std::size_t> at;
    const auto* b = reinterpret_cast<const unsigned char*>(data.data());
    const std::size_t n = data.size();
    // The next 0x1f and the next 0x28 at or after i, each found once per occurrence.
    const auto next = [&](unsigned char c, std::size_t i) -> std::size_t {
        const void* h = i < n ? std::memchr(b + i, c, n - i) : nullptr;
        return h ? static_cast<std::size_t>(static_cast<const unsigned char*>(h) - b) : n;
    };
    std::size_t g = next(0x1f, 0);
    std::size_t z = next(0x28, 0);
    while (at.size() < max) {
        const std::size_t k = std::min(g, z);
        if (k >= n)
            break;
        if (gzip_magic(b + k, n - k) || zstd_magic(b + k, n - k))
            at.push_back(k);
        if (k == g)
            g = next(0x1f, k + 1);
        if (k == z)
            z = next(0x28, k + 1);
    }
    return at;
}

namespace {

// True when a zlib stream plausibly starts at b: the header check passes (RFC 1950
// section 2.2) and inflating its first bytes raises no error. Text passes the header
// check now and then ("HK", "(S", "x^"); it then fails within a few bytes. One inflate
// state per thread, reset per probe, so a false start costs no allocation.
bool zlib_start(const unsigned char* b, std::size_t n) noexcept {
    if (n < 3 || !zlib_header(b[0], b[1]))
        return false;
    struct probe {
        z_stream zs{};
        bool ok = false;
        probe() { ok = inflateInit2(&zs, 15) == Z_OK; }
        ~probe() {
            if (ok)
                inflateEnd(&zs);
        }
    };
    thread_local probe p;
    if (!p.ok || inflateReset(&p.zs) != Z_OK)
        return false;
    unsigned char sink[256];
    p.zs.next_in = const_cast<unsigned char*>(b);
    p.zs.avail_in = static_cast<uInt>(std::min(n, embedded_probe));
    p.zs.next_out = sink;
    p.zs.avail_out = sizeof sink;
    const int rc = inflate(&p.zs, Z_SYNC_FLUSH);
    return rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR;
}

// A zlib CMF byte: CM 8, CINFO 0-7 (0x08, 0x18, ... 0x78).
bool zlib_cmf(unsigned char c) noexcept {
    return (c & 0x8f) == 0x08;
}

// Calls hit(k, coding) for every offset k < end where embedded_offsets() reports a start, in order,
// until hit returns false; a start's bytes are read up to data.size().
template <class Hit>
void each_embedded(std::string_view data, std::size_t end, Hit hit) {
    const auto* b = reinterpret_cast<const unsigned char*>(data.data());
    const std::size_t n = data.size();
    end = std::min(end, n);
    // The stream_decoder coding of a start at k, or none. No two formats can start at the
    // same offset: each pair differs in the first two bytes (a .lzma dictionary size
    // starts with 00 or ff, which no other second byte here is).
    const auto kind = [&](std::size_t k) -> std::string_view {
        const unsigned char c = b[k];
        const unsigned char* p = b + k;
        if (c == 0x1f && gzip_magic(p, n - k))
            return "gzip";
        if (c == 0x28 && zstd_magic(p, n - k))
            return "zstd";
        if (c == 'B' && bzip2_magic(p, n - k))
            return "bzip2";
        if (c == 0xfd)
            return xz_header(p, n - k) ? "xz" : "";
        if (zlib_cmf(c) && zlib_start(p, n - k))
            return "zlib";
        return lzma_alone_start(p, n - k) ? "lzma" : "";
    };
    const auto check = [&](std::size_t k) {
        const std::string_view c = kind(k);
        return c.empty() || hit(k, c);
    };
    std::size_t k = 0;
#if defined(__SSE2__)
    // 16 positions per test on the bytes of the headers, then only the positions a magic
    // can start at: 1f 8b, 28 b5, "BZ", fd "7", a zlib CMF byte followed by a FLG without
    // the preset-dictionary bit (lowercase letters, digits and most punctuation have it,
    // so "hC" and "XG" are checked and "he" is not), or a .lzma header's shape: properties
    // at most 224, a dictionary size whose low byte is 00 or ff, whose second is a multiple
    // of 8 or ff and whose upper three are not all zero, a size whose top byte is 00 or ff,
    // and a zero byte 13 (text never has one there).
    const auto eq = [](__m128i v, int c) {
        return _mm_cmpeq_epi8(v, _mm_set1_epi8(static_cast<char>(c)));
    };
    const auto load = [&](std::size_t i) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    };
    for (; k + 29 <= n && k < end; k += 16) {
        const __m128i v = load(k);
        const __m128i w = load(k + 1);
        const __m128i cmf = eq(_mm_and_si128(v, _mm_set1_epi8(static_cast<char>(0x8f))), 0x08);
        const __m128i no_dict = eq(_mm_and_si128(w, _mm_set1_epi8(0x20)), 0);
        __m128i hits = _mm_or_si128(
            _mm_or_si128(_mm_and_si128(cmf, no_dict), _mm_and_si128(eq(v, 0x1f), eq(w, 0x8b))),
            _mm_or_si128(_mm_or_si128(_mm_and_si128(eq(v, 0x28), eq(w, 0xb5)),
                                      _mm_and_si128(eq(v, 'B'), eq(w, 'Z'))),
                         _mm_and_si128(eq(v, 0xfd), eq(w, '7'))));
        // The .lzma shape only where a byte 13 is zero (never in text).
        const __m128i z13 = eq(load(k + 13), 0);
        if (_mm_movemask_epi8(z13) != 0) {
            const __m128i props =
                _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(static_cast<char>(224))), v);
            const __m128i d2 = load(k + 2);
            const __m128i dict_lo = _mm_and_si128(
                _mm_or_si128(eq(w, 0), eq(w, 0xff)),
                _mm_or_si128(eq(_mm_and_si128(d2, _mm_set1_epi8(7)), 0), eq(d2, 0xff)));
            const __m128i dict_hi = eq(_mm_or_si128(_mm_or_si128(d2, load(k + 3)), load(k + 4)), 0);
            const __m128i top = load(k + 12);
            const __m128i size = _mm_or_si128(eq(top, 0), eq(top, 0xff));
            hits = _mm_or_si128(
                hits, _mm_andnot_si128(dict_hi, _mm_and_si128(_mm_and_si128(props, dict_lo),
                                                              _mm_and_si128(size, z13))));
        }
        for (auto m = static_cast<unsigned>(_mm_movemask_epi8(hits)); m != 0; m &= m - 1) {
            const std::size_t at = k + static_cast<std::size_t>(__builtin_ctz(m));
            if (at >= end || !check(at))
                return;
        }
    }
#endif
    for (; k < end; ++k)
        if (!check(k))
            return;
}

} // namespace

bool starts_compressed(std::string_view data) noexcept {
    const auto* b = reinterpret_cast<const unsigned char*>(data.data());
    const std::size_t n = std::min<std::size_t>(data.size(), 12);
    return gzip_magic(b, n) || zstd_magic(b, n) || (n >= 2 && zlib_header(b[0], b[1])) ||
           bzip2_magic(b, n) || xz_header(b, n) || lzma_alone_prefix(b, n);
}

std::vector<std::size_t> embedded_offsets(std::string_view data) {
    std::vector<std::size_t> at;
    each_embedded(data, data.size(), [&](std::size_t k, std::string_view) {
        at.push_back(k);
        return true;
    });
    return at;
}

std::size_t first_embedded(std::string_view data, std::size_t end, std::string_view* coding) {
    std::size_t at = std::string_view::npos;
    each_embedded(data, end, [&](std::size_t k, std::string_view c) {
        at = k;
        if (coding)
            *coding = c;
        return false;
    });
    return at;
}

} // namespace sluice::dlp::decode
