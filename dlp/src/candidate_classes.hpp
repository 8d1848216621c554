// Internal to dlp/, included by variant_candidates.cpp and variant_runs.cpp (each its own
// copy: an anonymous namespace, functions inline): the byte
// classification that finds candidate runs for the variant pipeline (variants.hpp). A
// 256-entry class table, and per 64-byte chunk the bit masks of base64, hex, trigger and
// non-ASCII bytes, computed with AVX-512 VBMI, AVX2 or SSE2 (chosen once from the CPU,
// Intel's intrinsics guide for each instruction) or the table, turned into events.
#pragma once

#include "variant_detail.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace sluice::dlp {

namespace {

constexpr unsigned char k_b64 = 1;      // A-Z a-z 0-9 + / - _
constexpr unsigned char k_hex = 2;      // 0-9 a-f A-F
constexpr unsigned char k_trigger = 4;  // % \ &
constexpr unsigned char k_nonascii = 8; // >= 0x80
constexpr unsigned char k_hexd = 16;    // hex digits and the delimiters ':' '-' ' '

constexpr std::array<unsigned char, 256> make_classes() {
    std::array<unsigned char, 256> t{};
    for (int c = 'A'; c <= 'Z'; ++c)
        t[c] |= k_b64;
    for (int c = 'a'; c <= 'z'; ++c)
        t[c] |= k_b64;
    for (int c = '0'; c <= '9'; ++c)
        t[c] |= k_b64 | k_hex;
    for (int c = 'a'; c <= 'f'; ++c)
        t[c] |= k_hex;
    for (int c = 'A'; c <= 'F'; ++c)
        t[c] |= k_hex;
    t['+'] |= k_b64;
    t['/'] |= k_b64;
    t['-'] |= k_b64;
    t['_'] |= k_b64;
    t['%'] |= k_trigger;
    t['\\'] |= k_trigger;
    t['&'] |= k_trigger;
    for (int c = 0x80; c < 256; ++c)
        t[c] |= k_nonascii;
    for (int c = 0; c < 256; ++c)
        if (t[c] & k_hex)
            t[c] |= k_hexd;
    t[':'] |= k_hexd;
    t['-'] |= k_hexd;
    t[' '] |= k_hexd;
    return t;
}
constexpr auto cls = make_classes();

constexpr std::size_t min_run = 16;        // shortest base64 run worth decoding
constexpr std::size_t min_hex_run = 32;    // 16 decoded bytes
constexpr std::size_t min_binary_run = 64; // base64 decoding to binary: scanned as is
constexpr std::size_t min_hex_pairs = 8;   // delimited hex
constexpr std::size_t min_base32_run = 24; // 15 decoded bytes
constexpr std::size_t min_flip_run = 20;   // reversed or ROT13 token candidates
constexpr std::size_t max_flip_run = 256;
using variant_detail::npos;
using variant_detail::tail_slack;

inline bool is_hex(unsigned char c) noexcept {
    return (cls[c] & k_hex) != 0;
}

using variant_detail::is_space;

// Token delimiters for percent and entity regions.
inline bool is_token_delim(unsigned char c) noexcept {
    return is_space(c) || c == '"' || c == '\'' || c == '<' || c == '>' || c == '`';
}
// Escape regions span a whole string literal, spaces included ("BEGIN RSA PRIVATE KEY").
inline bool is_escape_delim(unsigned char c) noexcept {
    return c == '"' || c == '\'' || c == '<' || c == '>' || c == '`' || c == '\n' || c == '\r';
}

// Decoded base64/hex is worth scanning when it reads as text (secrets are ASCII, but a
// wrapped secret may carry look-alike or invisible UTF-8 characters) or is a compressed
// stream we can open. Random binary is about 37% printable ASCII and rarely valid UTF-8.
#if defined(__SSE2__)
// Bytes in [lo, hi] as 0xFF lanes (unsigned compare through max).
inline __m128i in_range(__m128i v, unsigned char lo, unsigned char hi) noexcept {
    const __m128i t = _mm_sub_epi8(v, _mm_set1_epi8(static_cast<char>(lo)));
    const __m128i lim = _mm_set1_epi8(static_cast<char>(hi - lo));
    return _mm_cmpeq_epi8(_mm_max_epu8(t, lim), lim);
}
inline __m128i eq(__m128i v, char c) noexcept {
    return _mm_cmpeq_epi8(v, _mm_set1_epi8(c));
}
#endif

// Bytes of `d` that are printable ASCII or part of a well-formed multi-byte UTF-8
// sequence (lead 0xC2-0xF4); a sequence cut by the end of `d` counts if well-formed so far.
// That is the printable ASCII bytes plus, for each lead byte followed by the continuation
// bytes its length asks for (or by the end of `d`), the lead and those bytes: a parse from
// the start reaches every lead (continuation bytes are never leads, and an ill-formed
// sequence gives up one byte), and well-formed sequences never overlap.
#if defined(__SSE2__)
// 16 bytes per step as bit masks, without a data-dependent branch: this runs for every
// base64 run in the input (plausible_b64), where a byte loop mispredicted on every other
// byte. One step counts the sequences that start in q[0, min(16, left)); q is readable to
// q + 32 and zero from q + left when left < 32.
inline std::size_t text_count_step(const unsigned char* q, std::size_t left) noexcept {
    const std::uint32_t in = left >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << left) - 1;
    std::uint32_t printable = 0;
    std::uint32_t cont = 0;
    std::uint32_t lead2 = 0;
    std::uint32_t lead3 = 0;
    std::uint32_t lead4 = 0;
    for (unsigned h = 0; h < 2; ++h) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h));
        const auto mask = [h](__m128i x) {
            return static_cast<std::uint32_t>(_mm_movemask_epi8(x)) << (16 * h);
        };
        printable |= mask(_mm_or_si128(_mm_or_si128(in_range(v, 0x20, 0x7e), eq(v, '\t')),
                                       _mm_or_si128(eq(v, '\n'), eq(v, '\r'))));
        cont |= mask(_mm_cmpeq_epi8(_mm_and_si128(v, _mm_set1_epi8(static_cast<char>(0xC0))),
                                    _mm_set1_epi8(static_cast<char>(0x80))));
        lead2 |= mask(in_range(v, 0xC2, 0xDF));
        lead3 |= mask(in_range(v, 0xE0, 0xEF));
        lead4 |= mask(in_range(v, 0xF0, 0xF4));
    }
    cont |= ~in; // past the end counts as a continuation (a cut sequence)
    const std::uint32_t mine = in & 0xFFFFu; // sequences starting in this step
    const std::uint32_t c1 = cont >> 1;
    const std::uint32_t c12 = c1 & (cont >> 2);
    const std::uint32_t v2 = lead2 & mine & c1;
    const std::uint32_t v3 = lead3 & mine & c12;
    const std::uint32_t v4 = lead4 & mine & c12 & (cont >> 3);
    const std::uint32_t v234 = v2 | v3 | v4;
    const std::uint32_t covered = v234 | (v234 << 1) | ((v3 | v4) << 2) | (v4 << 3);
    return static_cast<std::size_t>(__builtin_popcount(printable & mine) +
                                    __builtin_popcount(covered & in));
}

inline std::size_t text_count(std::string_view s) noexcept {
    const auto* d = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    std::size_t ok = 0;
    for (std::size_t p = 0; p < n; p += 16) {
        if (n - p >= 32) {
            ok += text_count_step(d + p, n - p);
            continue;
        }
        alignas(16) unsigned char tail[32] = {};
        std::memcpy(tail, d + p, n - p);
        ok += text_count_step(tail, n - p);
    }
    return ok;
}
#else
inline std::size_t text_count(std::string_view d) noexcept {
    std::size_t ok = 0;
    const std::size_t n = d.size();
    for (std::size_t i = 0; i < n;) {
        const auto c = static_cast<unsigned char>(d[i]);
        if (c < 0x80) {
            ok += (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t';
            ++i;
            continue;
        }
        const std::size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                                : c >= 0xE0 && c <= 0xEF ? 3
                                : c >= 0xF0 && c <= 0xF4 ? 4
                                                         : 0;
        std::size_t k = 1;
        while (len != 0 && k < len && i + k < n &&
               (static_cast<unsigned char>(d[i + k]) & 0xC0) == 0x80)
            ++k;
        if (len != 0 && (k == len || i + k == n)) {
            ok += k;
            i += k;
        } else {
            ++i;
        }
    }
    return ok;
}

#endif

inline bool mostly_printable(std::string_view d) noexcept {
    return d.size() >= 8 && text_count(d) * 5 >= d.size() * 4;
}

constexpr std::array<unsigned char, 256> make_b64_values() {
    std::array<unsigned char, 256> t{};
    for (int i = 0; i < 26; ++i) {
        t['A' + i] = static_cast<unsigned char>(i);
        t['a' + i] = static_cast<unsigned char>(26 + i);
    }
    for (int i = 0; i < 10; ++i)
        t['0' + i] = static_cast<unsigned char>(52 + i);
    t['+'] = t['-'] = 62;
    t['/'] = t['_'] = 63;
    return t;
}
constexpr auto b64_values = make_b64_values();

// The 12 bytes that the 16 base64 characters at p decode to (either alphabet, RFC 4648
// sections 4 and 5); the caller has checked that they are in it.
inline void b64_decode16(const unsigned char* p, char* out) noexcept {
    for (int g = 0; g < 4; ++g) {
        const unsigned char* q = p + 4 * g;
        const std::uint32_t v = (std::uint32_t{b64_values[q[0]]} << 18) |
                                (std::uint32_t{b64_values[q[1]]} << 12) |
                                (std::uint32_t{b64_values[q[2]]} << 6) | b64_values[q[3]];
        out[3 * g] = static_cast<char>(v >> 16);
        out[3 * g + 1] = static_cast<char>((v >> 8) & 0xFF);
        out[3 * g + 2] = static_cast<char>(v & 0xFF);
    }
}

// Most 16+ runs of the base64 alphabets in text are identifiers and paths: a run is
// decoded only when its first 16 characters (all in the alphabets) decode to 12 bytes
// that read as text or start a compressed stream (a secret's base64 starts at the run's
// start; binary payloads are dropped anyway). Decoded on the stack: this runs for every
// such run.
inline bool plausible_b64(const unsigned char* p) noexcept {
    alignas(16) char buf[32] = {}; // 12 bytes, zero-padded for text_count_step
    b64_decode16(p, buf);
    const std::string_view s(buf, 12);
#if defined(__SSE2__)
    const std::size_t text = text_count_step(reinterpret_cast<const unsigned char*>(buf), 12);
#else
    const std::size_t text = text_count(s);
#endif
    return text >= 9 || decode::looks_compressed(s);
}

// Whether the 12 bytes that 16 base64 characters decode to start a compressed stream
// (decode::starts_compressed).
inline bool shifted_compressed_b64(const unsigned char* p) noexcept {
    char buf[12];
    b64_decode16(p, buf);
    return decode::starts_compressed(std::string_view(buf, 12));
}

// The same test for base64 that may start 1-3 bytes into a run, after a glued word
// ("upl<base64>"). Stricter, because identifiers and paths are tried at three more
// alignments and, at one of them, often decode to 12 bytes that pass plausible_b64
// (letters, and high bytes that happen to pair as UTF-8): here the last 9 of the 12 bytes
// must be printable ASCII (the first 3 may come from the end of a glued word of 5-7
// characters), or the 16 characters must start a gzip stream ("H4sI"). On a clean 64 MiB
// text corpus one run in ~150,000 passes this, against ~12,000 for plausible_b64.
// Usually decided by the first 4 characters looked at.
inline bool plausible_shifted_b64(const unsigned char* p) noexcept {
    if (std::memcmp(p, "H4sI", 4) == 0 || shifted_compressed_b64(p))
        return true;
    for (int g = 3; g >= 1; --g) {
        const unsigned char* q = p + 4 * g;
        const std::uint32_t v = (std::uint32_t{b64_values[q[0]]} << 18) |
                                (std::uint32_t{b64_values[q[1]]} << 12) |
                                (std::uint32_t{b64_values[q[2]]} << 6) | b64_values[q[3]];
        for (int shift = 16; shift >= 0; shift -= 8) {
            const unsigned b = (v >> shift) & 0xFF;
            if ((b < 0x20 || b >= 0x7f) && b != '\n' && b != '\r' && b != '\t')
                return false;
        }
    }
    return true;
}

// Candidate finding, 64 bytes at a time: each chunk is classified into bit masks (bit
// k = byte k) and turned into events (chunk_events); chunks without any are skipped
// whole. Ordinary text has a candidate every few hundred bytes, so almost all the work
// is this classification: AVX2 when the CPU has it (checked once), else SSE2 (the x86-64
// baseline), else the class table.
struct chunk_masks {
    std::uint64_t b64 = 0;
    std::uint64_t hexdig = 0;
    std::uint64_t cd = 0;      // ':' '-'
    std::uint64_t sp = 0;      // ' '
    std::uint64_t pct = 0;     // '%'
    std::uint64_t amp = 0;     // '&'
    std::uint64_t bs = 0;      // '\\'
    std::uint64_t escnext = 0; // u U x / 0-7 (after '\\')
    std::uint64_t ampnext = 0; // '#' or a letter (after '&')
    std::uint64_t high = 0;    // >= 0x80
    // Set by the VBMI classifier only, which combines the byte-after tests in mask
    // registers (events_vbmi); it leaves cd, sp, pct, amp, bs, escnext and ampnext zero.
    std::uint64_t trig = 0; // chunk_events::trig
    std::uint64_t hexd = 0; // hex digits, ':' '-', and ' ' before a hex digit
};

// What the candidate loop visits in one chunk: bit k stands for byte c + k.
struct chunk_events {
    std::uint64_t b64 = 0;         ///< a run of 16+ base64-alphabet bytes covers k..k+15
    std::uint64_t hex = 0;         ///< a run of 16+ hex digits and delimiters covers k..k+15
    std::uint64_t trig = 0;        ///< a trigger that starts an escape worth decoding
    std::uint64_t hexdig = 0;      ///< hex digits of this chunk
    std::uint64_t hexdig_next = 0; ///< and of the next one
    std::uint64_t high = 0;        ///< bytes >= 0x80 (when the unicode family is on)
    bool any() const noexcept { return (b64 | hex | trig | high) != 0; }
    /// Hex digits among bytes k..k+15.
    unsigned hex_digits(unsigned k) const noexcept {
        const std::uint64_t w = k == 0 ? hexdig : (hexdig >> k) | (hexdig_next << (64 - k));
        return static_cast<unsigned>(__builtin_popcountll(w & 0xFFFFu));
    }
};

struct chunk_hit {
    std::size_t at = 0; ///< chunk start; >= n when nothing is left
    chunk_events ev;
};

// The masks of the chunk after the last hit: the next search usually starts there.
struct mask_cache {
    std::size_t at = std::numeric_limits<std::size_t>::max();
    chunk_masks masks;
    std::uint64_t high_on = 0; ///< all ones: chunks with bytes >= 0x80 are hits too
};

// Bit k set when bits k..k+15 of the 128-bit value hi:lo are all set (k < 64).
[[gnu::always_inline]] inline std::uint64_t runs16(std::uint64_t lo, std::uint64_t hi) noexcept {
    lo &= (lo >> 1) | (hi << 63);
    hi &= hi >> 1;
    lo &= (lo >> 2) | (hi << 62);
    hi &= hi >> 2;
    lo &= (lo >> 4) | (hi << 60);
    hi &= hi >> 4;
    return lo & ((lo >> 8) | (hi << 56));
}

// True when a 16-run can start in [0, 64) of hi:lo: such a run covers a whole aligned
// byte of lo, or the low byte of hi. The cheap test that rejects most chunks.
[[gnu::always_inline]] inline bool may_run16(std::uint64_t lo, std::uint64_t hi) noexcept {
    const std::uint64_t t = ~lo;
    const bool full_byte = ((t - 0x0101010101010101ull) & ~t & 0x8080808080808080ull) != 0;
    return full_byte || (hi & 0xFF) == 0xFF;
}

// Chunk `a` (bytes [c, c+64)) with the next chunk `b` for lookahead.
// Events of chunk `a` from its masks and those of the next chunk `b`, given the triggers
// and the hex-run masks of both (bit 63 of hexd_b is never looked at).
[[gnu::always_inline]] inline chunk_events events_from(const chunk_masks& a, const chunk_masks& b,
                                                       std::uint64_t high_on, std::uint64_t trig,
                                                       std::uint64_t hexd_a,
                                                       std::uint64_t hexd_b) noexcept {
    chunk_events e;
    e.high = a.high & high_on;
    e.hexdig = a.hexdig;
    e.hexdig_next = b.hexdig;
    e.trig = trig;
    if (may_run16(a.b64, b.b64))
        e.b64 = runs16(a.b64, b.b64);
    if (may_run16(hexd_a, hexd_b))
        e.hex = runs16(hexd_a, hexd_b) & ~e.b64; // plain hex is a base64 run too
    return e;
}

// Chunk `a` (bytes [c, c+64)) with the next chunk `b` for lookahead.
[[gnu::always_inline]] inline chunk_events events(const chunk_masks& a, const chunk_masks& b,
                                                  std::uint64_t high_on) noexcept {
    // The byte after each byte of `a`, as masks.
    const auto next = [](std::uint64_t x, std::uint64_t y) { return (x >> 1) | (y << 63); };
    // Unconditional: in JSON and code most chunks hold a '\\' or '&', and a branch on
    // that mispredicts. The same triggers as classify64_vbmi's: '%' or '&' before a hex
    // digit or a letter ("%u0067" too: before, only the VBMI classifier saw it, so a
    // token in %uXXXX escapes was found on AVX-512 machines and missed on the others).
    const std::uint64_t trig =
        ((a.pct | a.amp) & next(a.hexdig | a.ampnext, b.hexdig | b.ampnext)) |
        (a.bs & next(a.escnext, b.escnext));
    // A space counts for hex only before a hex digit, so indentation and prose never
    // look like "67 68 70".
    const std::uint64_t hexd_a = a.hexdig | a.cd | (a.sp & next(a.hexdig, b.hexdig));
    const std::uint64_t hexd_b = b.hexdig | b.cd | (b.sp & (b.hexdig >> 1));
    return events_from(a, b, high_on, trig, hexd_a, hexd_b);
}

// The same for the VBMI classifier's masks.
[[gnu::always_inline]] inline chunk_events events_vbmi(const chunk_masks& a, const chunk_masks& b,
                                                       std::uint64_t high_on) noexcept {
    return events_from(a, b, high_on, a.trig, a.hexd, b.hexd);
}

// The loop of next_events() for one classifier (a macro: a lambda or template would not
// inherit the AVX2 target of its caller).
#define SLUICE_NEXT_EVENTS_BODY(CLASSIFY, EVENTS)                                                  \
    if (c >= n)                                                                                    \
        return {n, {}};                                                                            \
    /* A classifier may read one byte past its 64 (classify64_vbmi). */                            \
    if (c + 128 < n) {                                                                             \
        chunk_masks cur = cache.at == c ? cache.masks : CLASSIFY(d + c);                           \
        while (c + 128 < n) {                                                                      \
            const chunk_masks nxt = CLASSIFY(d + c + 64);                                          \
            const chunk_events ev = EVENTS(cur, nxt, cache.high_on);                               \
            if (ev.any()) {                                                                        \
                cache.at = c + 64;                                                                 \
                cache.masks = nxt;                                                                 \
                return {c, ev};                                                                    \
            }                                                                                      \
            cur = nxt;                                                                             \
            c += 64;                                                                               \
        }                                                                                          \
    }                                                                                              \
    /* The last bytes: a zero-padded copy (a zero byte is in no class). */                         \
    alignas(64) unsigned char pad[256] = {};                                                       \
    std::memcpy(pad, d + c, n - c);                                                                \
    for (std::size_t off = 0; c + off < n; off += 64) {                                            \
        const chunk_events ev =                                                                    \
            EVENTS(CLASSIFY(pad + off), CLASSIFY(pad + off + 64), cache.high_on);                  \
        if (ev.any())                                                                              \
            return {c + off, ev};                                                                  \
    }                                                                                              \
    return {n, {}};

#if defined(__SSE2__)

[[gnu::always_inline]] inline void classify16_into(const unsigned char* p, unsigned shift,
                                                   chunk_masks& m) noexcept {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i lower = _mm_or_si128(v, _mm_set1_epi8(0x20));
    const __m128i digit = in_range(v, '0', '9');
    const __m128i alpha = in_range(lower, 'a', 'z');
    const __m128i hexalpha = in_range(lower, 'a', 'f');
    const __m128i dash = eq(v, '-');
    const __m128i slash = eq(v, '/');
    const __m128i b64 =
        _mm_or_si128(_mm_or_si128(digit, alpha),
                     _mm_or_si128(_mm_or_si128(eq(v, '+'), slash), _mm_or_si128(dash, eq(v, '_'))));
    const __m128i escnext = _mm_or_si128(_mm_or_si128(eq(lower, 'u'), eq(v, 'x')),
                                         _mm_or_si128(slash, in_range(v, '0', '7')));
    const auto mask = [shift](__m128i x) {
        return static_cast<std::uint64_t>(static_cast<unsigned>(_mm_movemask_epi8(x))) << shift;
    };
    m.b64 |= mask(b64);
    m.hexdig |= mask(_mm_or_si128(digit, hexalpha));
    m.cd |= mask(_mm_or_si128(eq(v, ':'), dash));
    m.sp |= mask(eq(v, ' '));
    m.pct |= mask(eq(v, '%'));
    m.amp |= mask(eq(v, '&'));
    m.bs |= mask(eq(v, '\\'));
    m.escnext |= mask(escnext);
    m.ampnext |= mask(_mm_or_si128(alpha, eq(v, '#')));
    m.high |= mask(v);
}

[[gnu::always_inline]] inline chunk_masks classify64_sse2(const unsigned char* p) noexcept {
    chunk_masks m;
    classify16_into(p, 0, m);
    classify16_into(p + 16, 16, m);
    classify16_into(p + 32, 32, m);
    classify16_into(p + 48, 48, m);
    return m;
}

inline chunk_hit next_events_sse2(const unsigned char* d, std::size_t c, std::size_t n,
                                  mask_cache& cache) noexcept {
    SLUICE_NEXT_EVENTS_BODY(classify64_sse2, events)
}

#if defined(__GNUC__) && defined(__x86_64__)
#define SLUICE_HAVE_AVX2_SKIP 1
__attribute__((target("avx2"), always_inline)) inline __m256i avx_eq(__m256i x, char ch) noexcept {
    return _mm256_cmpeq_epi8(x, _mm256_set1_epi8(ch));
}
__attribute__((target("avx2"), always_inline)) inline __m256i avx_range(__m256i x, char lo,
                                                                        char hi) noexcept {
    const __m256i t = _mm256_sub_epi8(x, _mm256_set1_epi8(lo));
    const __m256i lim = _mm256_set1_epi8(static_cast<char>(hi - lo));
    return _mm256_cmpeq_epi8(_mm256_max_epu8(t, lim), lim);
}

__attribute__((target("avx2"), always_inline)) inline void
classify32_into(const unsigned char* p, unsigned shift, chunk_masks& m) noexcept {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i lower = _mm256_or_si256(v, _mm256_set1_epi8(0x20));
    const __m256i digit = avx_range(v, '0', '9');
    const __m256i alpha = avx_range(lower, 'a', 'z');
    const __m256i dash = avx_eq(v, '-');
    const __m256i slash = avx_eq(v, '/');
    const __m256i b64 = _mm256_or_si256(_mm256_or_si256(digit, alpha),
                                        _mm256_or_si256(_mm256_or_si256(avx_eq(v, '+'), slash),
                                                        _mm256_or_si256(dash, avx_eq(v, '_'))));
    const __m256i escnext = _mm256_or_si256(_mm256_or_si256(avx_eq(lower, 'u'), avx_eq(v, 'x')),
                                            _mm256_or_si256(slash, avx_range(v, '0', '7')));
#define SLUICE_AVX_MASK(x)                                                                         \
    (static_cast<std::uint64_t>(static_cast<unsigned>(_mm256_movemask_epi8(x))) << shift)
    m.b64 |= SLUICE_AVX_MASK(b64);
    m.hexdig |= SLUICE_AVX_MASK(_mm256_or_si256(digit, avx_range(lower, 'a', 'f')));
    m.cd |= SLUICE_AVX_MASK(_mm256_or_si256(avx_eq(v, ':'), dash));
    m.sp |= SLUICE_AVX_MASK(avx_eq(v, ' '));
    m.pct |= SLUICE_AVX_MASK(avx_eq(v, '%'));
    m.amp |= SLUICE_AVX_MASK(avx_eq(v, '&'));
    m.bs |= SLUICE_AVX_MASK(avx_eq(v, '\\'));
    m.escnext |= SLUICE_AVX_MASK(escnext);
    m.ampnext |= SLUICE_AVX_MASK(_mm256_or_si256(alpha, avx_eq(v, '#')));
    m.high |= SLUICE_AVX_MASK(v);
#undef SLUICE_AVX_MASK
}

__attribute__((target("avx2"), always_inline)) inline chunk_masks
classify64_avx2(const unsigned char* p) noexcept {
    chunk_masks m;
    classify32_into(p, 0, m);
    classify32_into(p + 32, 32, m);
    return m;
}

__attribute__((target("avx2"))) inline chunk_hit
next_events_avx2(const unsigned char* d, std::size_t c, std::size_t n, mask_cache& cache) noexcept {
    SLUICE_NEXT_EVENTS_BODY(classify64_avx2, events)
}

// With AVX-512 VBMI one two-register byte permute looks up a class byte for all 64
// bytes (ASCII only; bytes >= 0x80 are in no class) and each class is one test into a
// mask register: a fifth of the AVX2 instructions. '%' and '&' share a bit, so a trigger
// is accepted when the next byte suits either (a superset: visit() decides).
constexpr unsigned char v_b64 = 1, v_hexdig = 2, v_cd = 4, v_sp = 8, v_pctamp = 16, v_bs = 32,
                        v_escnext = 64, v_ampnext = 128;
constexpr std::array<unsigned char, 128> make_vbmi_classes() {
    std::array<unsigned char, 128> t{};
    for (int ch = 0; ch < 128; ++ch) {
        const bool digit = ch >= '0' && ch <= '9';
        const bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        const bool hexalpha = (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
        unsigned v = 0;
        if (digit || alpha || ch == '+' || ch == '/' || ch == '-' || ch == '_')
            v |= v_b64;
        if (digit || hexalpha)
            v |= v_hexdig;
        if (ch == ':' || ch == '-')
            v |= v_cd;
        if (ch == ' ')
            v |= v_sp;
        if (ch == '%' || ch == '&')
            v |= v_pctamp;
        if (ch == '\\')
            v |= v_bs;
        if (ch == 'u' || ch == 'U' || ch == 'x' || ch == '/' || (ch >= '0' && ch <= '7'))
            v |= v_escnext;
        if (alpha || ch == '#')
            v |= v_ampnext;
        t[static_cast<std::size_t>(ch)] = static_cast<unsigned char>(v);
    }
    return t;
}
alignas(64) constexpr auto vbmi_classes = make_vbmi_classes();

__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) inline __m512i
vbmi_class_bytes(__m512i v, __mmask64 high) noexcept {
    const __m512i lo = _mm512_load_si512(vbmi_classes.data());
    const __m512i hi = _mm512_load_si512(vbmi_classes.data() + 64);
    return _mm512_maskz_permutex2var_epi8(~high, lo, v, hi);
}

// The 64 bytes at p, and the class bytes of the bytes after them (an unaligned load at
// p + 1, so p[64] must be readable): the byte-after tests of triggers and hex runs are
// combined in mask registers, and five masks leave them instead of nine.
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) inline chunk_masks
classify64_vbmi(const unsigned char* p) noexcept {
    const __m512i v = _mm512_loadu_si512(p);
    const __m512i v1 = _mm512_loadu_si512(p + 1);
    const __mmask64 high = _mm512_movepi8_mask(v);
    const __m512i c = vbmi_class_bytes(v, high);
    const __m512i c1 = vbmi_class_bytes(v1, _mm512_movepi8_mask(v1));
#define SLUICE_VBMI_TEST(x, bits)                                                                  \
    _mm512_test_epi8_mask(x, _mm512_set1_epi8(static_cast<char>(bits)))
    const __mmask64 hexdig = SLUICE_VBMI_TEST(c, v_hexdig);
    const __mmask64 trig =
        (SLUICE_VBMI_TEST(c, v_pctamp) & SLUICE_VBMI_TEST(c1, v_hexdig | v_ampnext)) |
        (SLUICE_VBMI_TEST(c, v_bs) & SLUICE_VBMI_TEST(c1, v_escnext));
    const __mmask64 hexd = SLUICE_VBMI_TEST(c, v_hexdig | v_cd) |
                           (SLUICE_VBMI_TEST(c, v_sp) & SLUICE_VBMI_TEST(c1, v_hexdig));
    chunk_masks m;
    m.b64 = static_cast<std::uint64_t>(SLUICE_VBMI_TEST(c, v_b64));
#undef SLUICE_VBMI_TEST
    m.hexdig = static_cast<std::uint64_t>(hexdig);
    m.high = static_cast<std::uint64_t>(high);
    m.trig = static_cast<std::uint64_t>(trig);
    m.hexd = static_cast<std::uint64_t>(hexd);
    return m;
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline chunk_hit
next_events_vbmi(const unsigned char* d, std::size_t c, std::size_t n, mask_cache& cache) noexcept {
    SLUICE_NEXT_EVENTS_BODY(classify64_vbmi, events_vbmi)
}
#endif
#else
inline chunk_masks classify64_table(const unsigned char* p) noexcept {
    chunk_masks m;
    for (unsigned k = 0; k < 64; ++k) {
        const unsigned char ch = p[k];
        const unsigned char cl = cls[ch];
        const std::uint64_t bit = std::uint64_t{1} << k;
        const bool alpha = (ch | 0x20) >= 'a' && (ch | 0x20) <= 'z';
        m.b64 |= (cl & k_b64) ? bit : 0;
        m.hexdig |= (cl & k_hex) ? bit : 0;
        m.cd |= (ch == ':' || ch == '-') ? bit : 0;
        m.sp |= ch == ' ' ? bit : 0;
        m.pct |= ch == '%' ? bit : 0;
        m.amp |= ch == '&' ? bit : 0;
        m.bs |= ch == '\\' ? bit : 0;
        m.escnext |=
            ((ch | 0x20) == 'u' || ch == 'x' || ch == '/' || (ch >= '0' && ch <= '7')) ? bit : 0;
        m.ampnext |= (alpha || ch == '#') ? bit : 0;
        m.high |= ch >= 0x80 ? bit : 0;
    }
    return m;
}
#endif

// The first chunk at or after `c` with events ({n, {}} when none is left).
inline chunk_hit next_events(const unsigned char* d, std::size_t c, std::size_t n,
                             mask_cache& cache) noexcept {
#if defined(__SSE2__)
#if defined(SLUICE_HAVE_AVX2_SKIP)
    static const bool vbmi = __builtin_cpu_supports("avx512vbmi") &&
                             __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512f");
    if (vbmi)
        return next_events_vbmi(d, c, n, cache);
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2)
        return next_events_avx2(d, c, n, cache);
#endif
    return next_events_sse2(d, c, n, cache);
#else
    SLUICE_NEXT_EVENTS_BODY(classify64_table, events)
#endif
}

} // namespace

} // namespace sluice::dlp
