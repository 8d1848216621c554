// The variant pipeline. The raw pass is one scanner call, exactly as without variants;
// everything else is driven by one cheap pass over the bytes with a 256-entry class
// table that finds candidate runs (base64/hex alphabet runs of 16+ bytes, and the
// regions around '%', '\\' and '&' escapes, and non-ASCII text). Only those runs are
// decoded, and binary-looking base64/hex output is dropped unless it is a gzip/zlib
// stream, so the cost on ordinary text stays a fraction of the raw scan.
#include "sluice/dlp/variants.hpp"

#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/decode.hpp"
#include "sluice/dlp/seam.hpp"

#include "joined.hpp"

#include <hs/hs.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

namespace sluice::dlp {

// ---------------------------------------------------------------------------------------
// protected values

struct protected_values::impl {
    hs_database_t* db = nullptr;
    std::vector<std::size_t> lengths;
    std::vector<std::string> fingerprints;
    ~impl() { hs_free_database(db); }
};

protected_values::protected_values(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}
protected_values::~protected_values() = default;

std::expected<std::shared_ptr<const protected_values>, std::string>
protected_values::compile(const std::vector<std::string>& values) {
    auto p = std::make_unique<impl>();
    std::vector<const char*> exprs;
    std::vector<std::size_t> lens;
    std::vector<unsigned> flags;
    std::vector<unsigned> ids;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const auto& v = values[i];
        if (v.empty())
            continue;
        if (v.size() < 4)
            return std::unexpected("protected value #" + std::to_string(i + 1) +
                                   " is shorter than 4 bytes");
        exprs.push_back(v.data());
        lens.push_back(v.size());
        flags.push_back(HS_FLAG_SINGLEMATCH);
        ids.push_back(static_cast<unsigned>(p->lengths.size()));
        p->lengths.push_back(v.size());
        p->fingerprints.push_back(detectors::fingerprint(v));
    }
    if (!exprs.empty()) {
        hs_compile_error_t* err = nullptr;
        if (hs_compile_lit_multi(exprs.data(), flags.data(), ids.data(), lens.data(),
                                 static_cast<unsigned>(exprs.size()), HS_MODE_BLOCK, nullptr,
                                 &p->db, &err) != HS_SUCCESS) {
            // The message names no value (Hyperscan reports the expression index only).
            std::string msg = "protected values: cannot compile (";
            msg += err && err->message ? "hyperscan error" : "unknown error";
            msg += ")";
            hs_free_compile_error(err);
            return std::unexpected(msg);
        }
    }
    return std::shared_ptr<const protected_values>(new protected_values(std::move(p)));
}

// ---------------------------------------------------------------------------------------
// classification

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
constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

bool is_hex(unsigned char c) noexcept {
    return (cls[c] & k_hex) != 0;
}

bool is_space(unsigned char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Token delimiters for percent and entity regions.
bool is_token_delim(unsigned char c) noexcept {
    return is_space(c) || c == '"' || c == '\'' || c == '<' || c == '>' || c == '`';
}
// Escape regions span a whole string literal, spaces included ("BEGIN RSA PRIVATE KEY").
bool is_escape_delim(unsigned char c) noexcept {
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
std::size_t text_count_step(const unsigned char* q, std::size_t left) noexcept {
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

std::size_t text_count(std::string_view s) noexcept {
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
std::size_t text_count(std::string_view d) noexcept {
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

bool mostly_printable(std::string_view d) noexcept {
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

// Most 16+ runs of the base64 alphabets in text are identifiers and paths: a run is
// decoded only when its first 16 characters (all in the alphabets) decode to 12 bytes
// that read as text or start a compressed stream (a secret's base64 starts at the run's
// start; binary payloads are dropped anyway). Decoded on the stack: this runs for every
// such run.
bool plausible_b64(const unsigned char* p) noexcept {
    alignas(16) char buf[32] = {}; // 12 bytes, zero-padded for text_count_step
    for (int g = 0; g < 4; ++g) {
        const unsigned char* q = p + 4 * g;
        const std::uint32_t v = (std::uint32_t{b64_values[q[0]]} << 18) |
                                (std::uint32_t{b64_values[q[1]]} << 12) |
                                (std::uint32_t{b64_values[q[2]]} << 6) | b64_values[q[3]];
        buf[3 * g] = static_cast<char>(v >> 16);
        buf[3 * g + 1] = static_cast<char>((v >> 8) & 0xFF);
        buf[3 * g + 2] = static_cast<char>(v & 0xFF);
    }
    const std::string_view s(buf, 12);
#if defined(__SSE2__)
    const std::size_t text = text_count_step(reinterpret_cast<const unsigned char*>(buf), 12);
#else
    const std::size_t text = text_count(s);
#endif
    return text >= 9 || decode::looks_compressed(s);
}

// The same test for base64 that may start 1-3 bytes into a run, after a glued word
// ("upl<base64>"). Stricter, because identifiers and paths are tried at three more
// alignments and, at one of them, often decode to 12 bytes that pass plausible_b64
// (letters, and high bytes that happen to pair as UTF-8): here the last 9 of the 12 bytes
// must be printable ASCII (the first 3 may come from the end of a glued word of 5-7
// characters), or the 16 characters must start a gzip stream ("H4sI"). On a clean 64 MiB
// text corpus one run in ~150,000 passes this, against ~12,000 for plausible_b64.
// Usually decided by the first 4 characters looked at.
bool plausible_shifted_b64(const unsigned char* p) noexcept {
    if (std::memcmp(p, "H4sI", 4) == 0)
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

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& ch : out)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && is_space(static_cast<unsigned char>(s.front())))
        s.remove_prefix(1);
    while (!s.empty() && is_space(static_cast<unsigned char>(s.back())))
        s.remove_suffix(1);
    return s;
}

// A media-type parameter (boundary=...), quotes removed.
std::string param(std::string_view content_type, std::string_view name) {
    std::size_t pos = content_type.find(';');
    while (pos != std::string_view::npos) {
        const std::size_t next = content_type.find(';', pos + 1);
        std::string_view kv = trim(content_type.substr(pos + 1, next - pos - 1));
        const std::size_t eq = kv.find('=');
        if (eq != std::string_view::npos && lower(trim(kv.substr(0, eq))) == name) {
            std::string_view v = trim(kv.substr(eq + 1));
            if (v.size() >= 2 && v.front() == '"' && v.back() == '"')
                v = v.substr(1, v.size() - 2);
            return std::string(v);
        }
        pos = next;
    }
    return {};
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

chunk_hit next_events_sse2(const unsigned char* d, std::size_t c, std::size_t n,
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

__attribute__((target("avx2"))) chunk_hit
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

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) chunk_hit
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
chunk_hit next_events(const unsigned char* d, std::size_t c, std::size_t n,
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
// The run of base64-alphabet bytes starting at d[i]: where it ends, whether it is all hex
// digits and whether it holds a '/', '-' or '_'. Sixteen bytes per step: one byte at a
// time, this was a tenth of the candidate pass.
struct alphabet_run {
    std::size_t end = 0;
    bool all_hex = true;
    bool has_sep = false;
};

alphabet_run scan_alphabet_run(const unsigned char* d, std::size_t i, std::size_t n) noexcept {
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
std::size_t line_break_end(const unsigned char* d, std::size_t j, std::size_t n) noexcept {
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

std::size_t next_region_stop(const unsigned char* d, std::size_t e, std::size_t n,
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
std::size_t next_piece_end(const unsigned char* d, std::size_t q, std::size_t j,
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

// Runs of equal groups of base64-alphabet bytes (and '=' at the very end), 4 to 76
// bytes each, separated by spaces, LF or CRLF, the last group possibly shorter: two
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
            if (!(cls[ch] & k_b64) && ch != ' ' && ch != '\n' && ch != '\r' &&
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
        unsigned m =
            static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(eq(v, ' '), eq(v, '\n'))));
        while (m != 0) {
            at_separator(k + static_cast<unsigned>(__builtin_ctz(m)));
            m &= m - 1;
        }
    }
#endif
    for (; k < n; ++k)
        if (d[k] == ' ' || d[k] == '\n')
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
        const __m128i sep = _mm_or_si128(_mm_or_si128(eq(v, ' '), eq(v, '\n')), eq(v, '\r'));
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

struct hs_scratch_closer {
    void operator()(hs_scratch_t* s) const noexcept { hs_free_scratch(s); }
};

} // namespace

// ---------------------------------------------------------------------------------------
// scanner

// Decoded candidates of one depth are batched into one buffer, separated by "\n \n" (which
// no candidate run crosses), and scanned with one scanner call: per-call overhead would
// otherwise dominate on text with many small candidates.
struct variant_scanner::segment {
    std::size_t begin = 0; ///< range in the level buffer
    std::size_t end = 0;
    std::string chain;
    std::size_t outer_off = 0;
    std::size_t outer_len = 0;
};

struct variant_scanner::level {
    std::string buf;
    std::vector<segment> segs;
    void clear() {
        buf.clear();
        segs.clear();
    }
};

struct variant_scanner::ctx {
    level next; ///< decoded candidates for the next depth
    std::string_view location;
    std::vector<variant_finding>* out = nullptr;
    std::unordered_set<std::string> seen; // rule '\0' fingerprint
    std::string tmp;
};

variant_scanner::variant_scanner(detectors::scanner& s, variant_options o)
    : scanner_(s)
    , opts_(std::move(o)) {}

variant_scanner::~variant_scanner() {
    if (hs_scratch_)
        hs_free_scratch(static_cast<hs_scratch_t*>(hs_scratch_));
}

void variant_scanner::reset() noexcept {
    ends_ = {};
    stats_ = {};
}

std::size_t variant_scanner::decode_room() const noexcept {
    const auto& b = opts_.budget;
    std::size_t rel = npos;
    if (b.decoded_ratio == 0 || stats_.input_bytes <= (npos - b.decoded_floor) / b.decoded_ratio)
        rel = b.decoded_floor + b.decoded_ratio * stats_.input_bytes;
    const std::size_t cap = std::min(rel, b.max_decoded_bytes);
    return cap > stats_.decoded_bytes ? cap - stats_.decoded_bytes : 0;
}

bool variant_scanner::charge(std::size_t n) noexcept {
    if (n > decode_room())
        return false;
    stats_.decoded_bytes += n;
    return true;
}

variant_status variant_scanner::scan_buffer(std::string_view data, const std::string& chain,
                                            std::size_t outer_off, std::size_t outer_len, ctx& c,
                                            const std::vector<segment>* segs) {
    scratch_.clear();
    if (!scanner_.scan(data, scratch_))
        return variant_status::scanner_error;
    if (opts_.protect && opts_.protect->get().db) {
        const auto& pv = opts_.protect->get();
        if (!hs_scratch_) {
            hs_scratch_t* s = nullptr;
            if (hs_alloc_scratch(pv.db, &s) != HS_SUCCESS)
                return variant_status::scanner_error;
            hs_scratch_ = s;
        }
        struct hit_ctx {
            const protected_values::impl* pv;
            std::vector<detectors::finding>* out;
        } hc{&pv, &scratch_};
        const auto on_match = [](unsigned id, unsigned long long, unsigned long long to, unsigned,
                                 void* p) -> int {
            auto* h = static_cast<hit_ctx*>(p);
            detectors::finding f;
            f.rule_id = "protected-value";
            f.category = "protected";
            f.end = static_cast<std::size_t>(to);
            f.begin = f.end - h->pv->lengths[id];
            f.confidence = 1.0;
            f.fingerprint = h->pv->fingerprints[id];
            h->out->push_back(std::move(f));
            return 0;
        };
        if (hs_scan(pv.db, data.data(), static_cast<unsigned>(data.size()), 0,
                    static_cast<hs_scratch_t*>(hs_scratch_), on_match, &hc) != HS_SUCCESS)
            return variant_status::scanner_error;
    }
    for (auto& f : scratch_) {
        std::string key = f.rule_id;
        key += '\0';
        key += f.fingerprint;
        if (!c.seen.insert(std::move(key)).second)
            continue; // already reported through a shorter chain
        variant_finding v;
        v.location = std::string(c.location);
        if (segs) {
            // The segment holding the start of the match.
            auto it =
                std::upper_bound(segs->begin(), segs->end(), f.begin,
                                 [](std::size_t off, const segment& sg) { return off < sg.begin; });
            if (it == segs->begin())
                continue;
            --it;
            if (f.begin >= it->end)
                continue; // inside a separator
            f.begin -= it->begin;
            f.end -= it->begin;
            v.variant = it->chain;
            v.offset = it->outer_off;
            v.length = it->outer_len;
        } else if (outer_len == npos) {
            v.variant = chain.empty() ? "raw" : chain;
            v.offset = f.begin;
            v.length = f.end >= f.begin ? f.end - f.begin : 0;
        } else {
            v.variant = chain.empty() ? "raw" : chain;
            v.offset = outer_off;
            v.length = outer_len;
        }
        v.f = std::move(f);
        c.out->push_back(std::move(v));
    }
    return variant_status::ok;
}

variant_status variant_scanner::process(std::string_view data, std::string& chain,
                                        std::size_t depth, std::size_t outer_off,
                                        std::size_t outer_len, ctx& c) {
    auto st = scan_buffer(data, chain, outer_off, outer_len, c, nullptr);
    if (st != variant_status::ok || !opts_.decoders)
        return st;
    c.next.clear();
    st = candidates(data, chain, depth, outer_off, outer_len, c);
    level cur;
    std::string seg_chain;
    while (st == variant_status::ok && !c.next.segs.empty()) {
        // Something decodes once more than max_depth allows: it would go out unscanned,
        // so the depth is a budget like the others (over_budget, 413 decode_budget).
        if (depth >= opts_.budget.max_depth) {
            st = variant_status::over_budget;
            break;
        }
        ++depth;
        std::swap(cur, c.next);
        c.next.clear();
        stats_.scanned_variants += cur.segs.size();
        st = scan_buffer(cur.buf, chain, 0, 0, c, &cur.segs);
        if (st != variant_status::ok)
            break;
        for (const auto& sg : cur.segs) {
            seg_chain = sg.chain;
            st = candidates(std::string_view(cur.buf).substr(sg.begin, sg.end - sg.begin),
                            seg_chain, depth, sg.outer_off, sg.outer_len, c);
            if (st != variant_status::ok)
                break;
        }
    }
    c.next.clear();
    return st;
}

variant_status variant_scanner::try_decoded(std::string_view decoded, std::string_view step,
                                            std::string& chain, std::size_t depth, std::size_t off,
                                            std::size_t len, ctx& c) {
    segment sg;
    sg.begin = c.next.buf.size();
    c.next.buf += decoded;
    sg.end = c.next.buf.size();
    c.next.buf += "\n \n";
    sg.chain = chain;
    if (!sg.chain.empty())
        sg.chain += '>';
    sg.chain += step;
    sg.outer_off = off;
    sg.outer_len = len;
    c.next.segs.push_back(std::move(sg));
    return variant_status::ok;
}

// A decoded or inflated buffer that is itself compressed (gzip in gzip, zstd after junk
// inside an inflated stream, bzip2 in base64 in gzip): each stream is opened and goes to
// the next depth, so every layer counts against max_depth like base64 in base64, and a
// buffer still compressed past it is over budget. Bytes around the streams are in this
// depth's buffer and scanned with it. The body as sent is opened by scan_body.
variant_status variant_scanner::open_compressed(std::string_view data, std::string& chain,
                                                std::size_t depth, std::size_t outer_off,
                                                std::size_t outer_len, ctx& c) {
    std::string inflated;
    std::string_view name;
    const auto o = outer_len == npos ? std::size_t{0} : outer_off;
    const auto l = outer_len == npos ? data.size() : outer_len;
    const auto open = [&](std::size_t off) -> variant_status {
        const auto rc = decode::sniffed(data.substr(off), decode_room(), inflated, name);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        if (rc == decode::inflate_status::unknown || inflated.empty())
            return variant_status::ok;
        if (!charge(inflated.size()))
            return variant_status::over_budget;
        return try_decoded(inflated, name, chain, depth, o, l, c);
    };
    auto st = open(0);
    for (const std::size_t off : decode::magic_offsets(data, 17))
        if (st == variant_status::ok && off > 0)
            st = open(off);
    return st;
}

variant_status variant_scanner::candidates(std::string_view data, std::string& chain,
                                           std::size_t depth, std::size_t outer_off,
                                           std::size_t outer_len, ctx& c) {
    if (depth > 0) {
        auto st = open_compressed(data, chain, depth, outer_off, outer_len, c);
        if (st != variant_status::ok)
            return st;
    }
    const auto* d = reinterpret_cast<const unsigned char*>(data.data());
    const std::size_t n = data.size();
    std::string decoded;
    std::string inflated;
    // Where a candidate's own range maps in the outermost buffer.
    const auto where = [&](std::size_t b, std::size_t e) {
        return outer_len == npos ? std::pair{b, e - b} : std::pair{outer_off, outer_len};
    };
    const auto count = [&]() { return ++stats_.candidates <= opts_.budget.max_candidates; };
    // Binary decoders (base64, hex): open compressed streams, drop binary noise.
    const auto binary = [&](std::string_view step, std::size_t b, std::size_t e,
                            bool& useful) -> variant_status {
        useful = false;
        if (!charge(decoded.size()))
            return variant_status::over_budget;
        const auto [o, l] = where(b, e);
        if (decode::looks_compressed(decoded)) {
            const bool zstd = static_cast<unsigned char>(decoded[0]) == 0x28;
            const auto rc =
                decode::content(zstd ? "zstd" : "deflate", decoded, decode_room(), inflated);
            const auto rg = rc == decode::inflate_status::error && !zstd
                                ? decode::content("gzip", decoded, decode_room(), inflated)
                                : rc;
            if (rg == decode::inflate_status::over_limit)
                return variant_status::over_budget;
            // A stream that breaks off, or is followed by other bytes (the next line of a
            // multipart body decoded onto its end), is scanned as far as it decodes.
            if (rg == decode::inflate_status::ok ||
                (rg == decode::inflate_status::error && !inflated.empty())) {
                if (!charge(inflated.size()))
                    return variant_status::over_budget;
                useful = true;
                const std::size_t saved = chain.size();
                if (!chain.empty())
                    chain += '>';
                chain += step;
                std::string mine = std::move(inflated);
                auto st = try_decoded(mine, zstd ? "zstd" : "gzip", chain, depth + 1, o, l, c);
                chain.resize(saved);
                return st;
            }
        }
        if (!mostly_printable(decoded)) {
            // Binary from hex (a key store, a blob with a key's base64 appended): the
            // next depth looks for encoded text inside it. Short runs (hashes) are noise.
            // Not `useful`: the other alignment of a misaligned run is still tried.
            if (step != "hex" || decoded.size() < min_binary_run)
                return variant_status::ok;
            std::string mine = std::move(decoded);
            return try_decoded(mine, step, chain, depth, o, l, c);
        }
        useful = true;
        std::string mine = std::move(decoded); // the recursion reuses `decoded`
        return try_decoded(mine, step, chain, depth, o, l, c);
    };
    // Hex in [a, b) (all hex digits, 32 or more), decoded at the alignments a stray digit
    // glued on either side leaves: even length whole, then without both end digits; odd
    // length without its last digit, then without its first.
    const auto hex_span = [&](std::size_t a, std::size_t b, bool& useful) -> variant_status {
        useful = false;
        const bool even = (b - a) % 2 == 0;
        const std::pair<std::size_t, std::size_t> tries[2] = {
            even ? std::pair{a, b} : std::pair{a, b - 1},
            even ? std::pair{a + 1, b - 1} : std::pair{a + 1, b}};
        for (const auto& [x, y] : tries) {
            if (y - x < min_hex_run)
                continue;
            if (!count())
                return variant_status::over_budget;
            if (decode::hex(data.substr(x, y - x), decoded)) {
                auto st = binary("hex", x, y, useful);
                if (st != variant_status::ok || useful)
                    return st;
            }
        }
        return variant_status::ok;
    };
    // Base64 in the alphabet run [b, e) (e after its padding) whose first 16 characters
    // lie in [b, limit): decoded from b when those characters read as text (plausible_b64),
    // else from b+1, b+2 or b+3 (plausible_shifted_b64), for base64 glued to a word whose
    // length is not a multiple of 4 ("upl<base64>"; a glued word of 4 costs 3 of the 12
    // bytes, which plausible_b64 tolerates). Stops at the first alignment whose decoding is
    // useful and sets `start` to it. The shifted alignments cost a 4-16 character test;
    // they count as candidates only when it passes.
    const auto base64_aligned = [&](std::size_t b, std::size_t limit, std::size_t e,
                                    std::size_t& start, bool& useful) -> variant_status {
        useful = false;
        start = b;
        for (std::size_t k = 0; k < 4 && !useful && b + k + min_run <= limit; ++k) {
            if (!(k == 0 ? plausible_b64(d + b) : plausible_shifted_b64(d + b + k)))
                continue;
            if (k != 0 && !count())
                return variant_status::over_budget;
            if (!decode::base64(data.substr(b + k, e - b - k), decoded))
                continue;
            auto st = binary("base64", b + k, e, useful);
            if (st != variant_status::ok)
                return st;
            if (useful)
                start = b + k;
        }
        return variant_status::ok;
    };

    level flips; // reversed, ROT13 and unprefixed runs, scanned in one call at the end
    const auto add_flip = [&](std::string_view bytes, std::string_view step, std::size_t o,
                              std::size_t l) {
        segment sg;
        sg.begin = flips.buf.size();
        flips.buf += bytes;
        sg.end = flips.buf.size();
        flips.buf += "\n \n";
        sg.chain = chain.empty() ? std::string(step) : chain + ">" + std::string(step);
        sg.outer_off = o;
        sg.outer_len = l;
        flips.segs.push_back(std::move(sg));
    };
    // Base32 (RFC 4648 sections 6 and 7) in an alphabet run [b, j) (e after '=' padding),
    // and a run that may be a token written backwards or in ROT13: 20-256 bytes mixing
    // capitals, small letters and digits on one line (identifiers and words rarely do;
    // base64 blobs are longer). Both copies go to the next depth as they are.
    const auto run_transforms = [&](std::size_t b, std::size_t j, std::size_t e, bool all_hex,
                                    bool wrapped) -> variant_status {
        const std::size_t len = j - b;
        if (len >= min_base32_run && !all_hex) {
            bool upper = false, lower = false, ok = true, hex32 = true;
            for (std::size_t k = b; k < j && ok; ++k) {
                const unsigned char ch = d[k];
                upper = upper || (ch >= 'A' && ch <= 'Z');
                lower = lower || (ch >= 'a' && ch <= 'z');
                ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '\r' || ch == '\n';
                hex32 = hex32 && !((ch | 0x20) > 'v' && (ch | 0x20) <= 'z');
            }
            if (ok && !(upper && lower)) {
                for (const bool hexa : {false, true}) {
                    if (hexa && !hex32)
                        continue;
                    if (!count())
                        return variant_status::over_budget;
                    if (decode::base32(data.substr(b, e - b), decoded, hexa)) {
                        bool useful = false;
                        auto st = binary(hexa ? "base32hex" : "base32", b, e, useful);
                        if (st != variant_status::ok || useful)
                            return st;
                    }
                }
            }
        }
        if (wrapped || all_hex || len < min_flip_run || len > max_flip_run)
            return variant_status::ok;
        // A GitHub classic token without its prefix: exactly 36 base62 characters whose last
        // 6 are the base62 CRC32 of the first 30 (random words pass with probability
        // 62^-6). Scanned with the prefix put back, so the token's own rule reports it.
        if (len == 36 &&
            std::all_of(d + b, d + j, [](unsigned char ch) { return std::isalnum(ch) != 0; }) &&
            detectors::validate("github_strict", data.substr(b, len))) {
            const auto [o, l] = where(b, j);
            add_flip("ghp_" + std::string(data.substr(b, len)), "unprefixed", o, l);
        }
        bool upper = false, lower = false, digit = false;
        for (std::size_t k = b; k < j; ++k) {
            const unsigned char ch = d[k];
            upper = upper || (ch >= 'A' && ch <= 'Z');
            lower = lower || (ch >= 'a' && ch <= 'z');
            digit = digit || (ch >= '0' && ch <= '9');
        }
        if (!(upper && lower && digit))
            return variant_status::ok;
        const auto [o, l] = where(b, j);
        for (const std::string_view step : {"reverse", "rot13"}) {
            if (!count() || !charge(len))
                return variant_status::over_budget;
            const auto run = data.substr(b, len);
            if (step == "reverse")
                decoded.assign(run.rbegin(), run.rend());
            else
                decode::rot13(run, decoded);
            // Scanned with this depth's other flipped runs, not decoded further: a
            // reversed or rotated run is the token itself or nothing.
            add_flip(decoded, step, o, l);
        }
        return variant_status::ok;
    };

    std::size_t last_region_end = 0;
    // One candidate decision at byte i (a run, a trigger or nothing); sets next_i.
    const auto visit = [&](std::size_t i, std::size_t& next_i) -> variant_status {
        const unsigned char cl = cls[d[i]];
        if ((cl & (k_b64 | k_trigger)) == 0) {
            next_i = i + 1;
            return variant_status::ok;
        }
        if (cl & k_b64) {
            // Delimited hex "67:68:70" / "67-68" / "67 68".
            if ((opts_.enabled & dec_hex) && i + 4 < n && is_hex(d[i]) && is_hex(d[i + 1]) &&
                (d[i + 2] == ':' || d[i + 2] == '-' || d[i + 2] == ' ') && is_hex(d[i + 3]) &&
                is_hex(d[i + 4]) && (i == 0 || !(cls[d[i - 1]] & k_b64))) {
                const unsigned char delim = d[i + 2];
                std::size_t k = i;
                std::size_t pairs = 0;
                while (k + 1 < n && is_hex(d[k]) && is_hex(d[k + 1])) {
                    ++pairs;
                    k += 2;
                    if (k + 2 < n && d[k] == delim && is_hex(d[k + 1]) && is_hex(d[k + 2]))
                        ++k;
                    else
                        break;
                }
                if (pairs >= min_hex_pairs && (k >= n || !is_hex(d[k]))) {
                    if (!count())
                        return variant_status::over_budget;
                    if (decode::hex(data.substr(i, k - i), decoded)) {
                        bool useful = false;
                        auto st = binary("hex", i, k, useful);
                        if (st != variant_status::ok)
                            return st;
                    }
                    next_i = k;
                    return variant_status::ok;
                }
            }
            // A run of the base64 alphabets, continued across CRLF or LF line breaks when
            // each line before a break holds 16+ alphabet bytes.
            const alphabet_run run = scan_alphabet_run(d, i, n);
            std::size_t j = run.end;
            bool has_sep = run.has_sep;
            if (j - i < min_run) {
                // The common case (a word): nothing to decode, and too short to be a
                // wrapped line. Kept to one table lookup per byte.
                next_i = j;
                return variant_status::ok;
            }
            std::size_t line_start = i;
            std::size_t first_line_end = npos;
            std::size_t last_break = npos;
            bool wrapped = false;
            for (;;) {
                if (const std::size_t k = line_break_end(d, j, n); k != j) {
                    const std::size_t line = j - line_start;
                    // Any width of 16 or more, and lines of different widths (PEM 64,
                    // MIME 76, tools at 60, 70 or 72, wrapping by hand).
                    if (line >= min_run && k < n && (cls[d[k]] & k_b64)) {
                        if (first_line_end == npos)
                            first_line_end = j;
                        last_break = j;
                        wrapped = true;
                        const alphabet_run line_run = scan_alphabet_run(d, k, n);
                        j = line_run.end;
                        has_sep = has_sep || line_run.has_sep;
                        line_start = k;
                        continue;
                    }
                }
                break;
            }
            const bool all_hex = !wrapped && run.all_hex;
            std::size_t end = j;
            while (end < n && end - j < 2 && d[end] == '=')
                ++end;
            const std::size_t len = j - i;
            if (!(opts_.enabled & (all_hex ? dec_hex : dec_base64))) {
                // family off (benchmarks)
            } else if (all_hex && len >= min_hex_run) {
                bool useful = false;
                auto st = hex_span(i, j, useful);
                if (st != variant_status::ok)
                    return st;
            } else if (!all_hex && len >= min_run) {
                if (!count())
                    return variant_status::over_budget;
                bool useful = false;
                // Most 16+ runs in text are identifiers and paths: decode 16 characters
                // first and drop the run when those 12 bytes are not text at any of the 4
                // alignments (a secret's base64 starts at the run's start or just after a
                // word glued to it; binary payloads are dropped anyway).
                std::size_t start = i;
                auto st0 = base64_aligned(i, wrapped ? first_line_end : j, end, start, useful);
                if (st0 != variant_status::ok)
                    return st0;
                if (wrapped && useful) {
                    // What looked like wrapping may be one line followed by unrelated
                    // text ("--boundary"): the first line on its own too.
                    if (!count())
                        return variant_status::over_budget;
                    if (decode::base64(data.substr(start, first_line_end - start), decoded)) {
                        bool u2 = false;
                        auto st = binary("base64", start, first_line_end, u2);
                        if (st != variant_status::ok)
                            return st;
                    }
                }
                if (wrapped && last_break != first_line_end) {
                    // Or the wrapped lines followed by one unrelated line (a multipart
                    // boundary after unpadded base64), whose bytes would be decoded onto
                    // the end of the secret: everything before the last line on its own.
                    if (!count())
                        return variant_status::over_budget;
                    if (decode::base64(data.substr(start, last_break - start), decoded)) {
                        bool u2 = false;
                        auto st = binary("base64", start, last_break, u2);
                        if (st != variant_status::ok)
                            return st;
                    }
                }
                if (!useful && (has_sep || wrapped)) {
                    // Misaligned by a prefix ("/upload/<base64>", "key-<base64>"), or a
                    // line break that was not wrapping (a hex line, then "--boundary"):
                    // try the pieces between separators on their own.
                    std::size_t p = i;
                    while (p < j) {
                        const std::size_t q = next_piece_end(d, p, j, n);
                        if (q - p >= min_run && !(p == i && q == j)) {
                            if (!count())
                                return variant_status::over_budget;
                            const std::size_t qe = q == j ? end : q;
                            bool piece_hex = (q - p) % 2 == 0 && q - p >= min_hex_run;
                            for (std::size_t k = p; piece_hex && k < q; ++k)
                                piece_hex = is_hex(d[k]);
                            bool u2 = false;
                            if (piece_hex) {
                                if (decode::hex(data.substr(p, q - p), decoded)) {
                                    auto st = binary("hex", p, q, u2);
                                    if (st != variant_status::ok)
                                        return st;
                                }
                            } else {
                                // Same test at the same 4 alignments as for whole runs. The
                                // base64 may go on past a '/', '-' or '_' of its own or
                                // past wrapping: decoded to the run's end first (unless it
                                // starts the run, tried whole above), then up to the
                                // separator alone.
                                std::size_t ps = p;
                                const std::size_t e1 = p == i ? qe : end;
                                auto st = base64_aligned(p, q, e1, ps, u2);
                                if (st == variant_status::ok && !u2 && qe != e1)
                                    st = base64_aligned(p, q, qe, ps, u2);
                                if (st != variant_status::ok)
                                    return st;
                            }
                        }
                        p = q + 1;
                    }
                }
                if (!useful && len > min_hex_run) {
                    // Hex glued to words ("key" + hex, "x" + hex + "g"): the run's longest
                    // stretch of hex digits on its own (a shorter run cannot hold one of
                    // min_hex_run digits that is not the whole run).
                    std::size_t la = i, lb = i;
                    for (std::size_t k = i; k < j;) {
                        if (!is_hex(d[k])) {
                            ++k;
                            continue;
                        }
                        std::size_t m = k;
                        while (m < j && is_hex(d[m]))
                            ++m;
                        if (m - k > lb - la) {
                            la = k;
                            lb = m;
                        }
                        k = m;
                    }
                    if (lb - la >= min_hex_run && !(la == i && lb == j)) {
                        auto st = hex_span(la, lb, useful);
                        if (st != variant_status::ok)
                            return st;
                    }
                }
                if (!useful && len >= min_binary_run) {
                    // A long run whose start decodes to binary (base64 of `tar c .env`, of
                    // a key store, of an image with a key appended): its bytes get the
                    // rules as they are, with no decoding beyond (binary is not text).
                    if (!count())
                        return variant_status::over_budget;
                    if (decode::base64(data.substr(i, end - i), decoded)) {
                        if (!charge(decoded.size()))
                            return variant_status::over_budget;
                        // Scanned at the next depth with its own candidates: base64 or
                        // hex of the key inside the binary is decoded again.
                        const auto [o, l] = where(i, end);
                        std::string mine = std::move(decoded);
                        auto st = try_decoded(mine, "base64", chain, depth, o, l, c);
                        if (st != variant_status::ok)
                            return st;
                    }
                }
            }
            if (opts_.enabled & dec_base64) {
                auto st = run_transforms(i, j, end, all_hex, wrapped);
                if (st != variant_status::ok)
                    return st;
            }
            next_i = end > i ? end : i + 1;
            return variant_status::ok;
        }
        // Triggers: '%', '\\', '&'.
        const unsigned char t = d[i];
        bool valid = false;
        if (t == '%') {
            valid = (i + 2 < n && is_hex(d[i + 1]) && is_hex(d[i + 2])) ||
                    (i + 5 < n && (d[i + 1] == 'u' || d[i + 1] == 'U') && is_hex(d[i + 2]) &&
                     is_hex(d[i + 3]) && is_hex(d[i + 4]) && is_hex(d[i + 5]));
        } else if (t == '\\') {
            // Only escapes that can spell arbitrary characters (\u, \x, octal) or split a
            // URL (\/) start a region; \n and \" alone are everywhere in JSON and code
            // and hide nothing (JSON bodies are unescaped whole by extraction anyway).
            valid =
                i + 1 < n && std::string_view("uUx/01234567").find(static_cast<char>(d[i + 1])) !=
                                 std::string_view::npos;
        } else {
            if (i + 2 < n && (d[i + 1] == '#' || std::isalpha(d[i + 1]))) {
                const std::size_t semi = data.substr(0, std::min(n, i + 13)).find(';', i + 1);
                valid = semi != std::string_view::npos;
            }
        }
        const unsigned fam = t == '%' ? dec_pct : t == '\\' ? dec_escape : dec_html;
        if (!valid || !(opts_.enabled & fam)) {
            next_i = i + 1;
            return variant_status::ok;
        }
        const bool esc = t == '\\';
        std::size_t b = i;
        while (b > last_region_end) {
            const unsigned char p = d[b - 1];
            if (esc ? is_escape_delim(p) && !(b >= 2 && d[b - 2] == '\\') : is_token_delim(p))
                break;
            --b;
        }
        std::size_t e = i;
        while (e < n) {
            e = next_region_stop(d, e, n, esc);
            if (e >= n)
                break;
            if (esc && d[e] == '\\' && e + 1 < n) {
                e += 2;
                continue;
            }
            if (esc ? is_escape_delim(d[e]) : is_token_delim(d[e]))
                break;
            ++e;
        }
        last_region_end = e;
        if (e - b < min_run) {
            // Decodes to fewer bytes than the shortest secret.
            next_i = e > i ? e : i + 1;
            return variant_status::ok;
        }
        if (!count())
            return variant_status::over_budget;
        const std::string_view region = data.substr(b, e - b);
        bool changed = false;
        std::string_view step;
        if (t == '%') {
            changed = decode::percent(region, decoded);
            step = "pct";
        } else if (esc) {
            changed = decode::js_escape(region, decoded);
            step = "escape";
        } else {
            changed = decode::html_entities(region, decoded);
            step = "html";
        }
        if (changed) {
            if (!charge(decoded.size()))
                return variant_status::over_budget;
            const auto [o, l] = where(b, e);
            std::string mine = std::move(decoded);
            auto st = try_decoded(mine, step, chain, depth, o, l, c);
            if (st != variant_status::ok)
                return st;
        }
        next_i = e > i ? e : i + 1;
        return variant_status::ok;
    };

    // Candidate starts come from next_events(): 64-byte chunks classified with SIMD into
    // bit masks, runs of 16+ base64 or hex-and-delimiter bytes and valid triggers (a '%'
    // before a hex digit, a '\\' before u/x/octal/'/', a '&' before '#' or a letter) found
    // on the masks, chunks without any skipped whole. Events are visited in byte order.
    // A per-byte branch would mispredict every few bytes on ordinary text (word/space
    // alternation, "\\n" in JSON) and cost more than the raw scan.
    std::size_t done = 0; // bytes before this have been decided
    const auto visit_from = [&](std::size_t i) -> variant_status {
        std::size_t next = i + 1;
        auto st = visit(i, next);
        done = std::max(done, std::max(next, i + 1));
        return st;
    };
    // Non-ASCII text: each whitespace-delimited token holding a byte >= 0x80, nearby ones
    // merged, folded after the candidate loop (escape regions it visits may span such
    // text). The loop reports chunks holding such bytes as hits (mask_cache::high_on), and
    // na_scan looks at those chunks and at the bytes a visit skipped (never classified):
    // one read of the input instead of a second pass over all of it.
    std::vector<std::pair<std::size_t, std::size_t>> na_regions;
    std::size_t na_begin = npos;
    std::size_t na_end = 0;
    std::size_t na_pos = 0; // bytes before this have been looked at
    // Non-ASCII bytes in [k, to), and the tokens they are in (which may reach past `to`).
    const auto na_scan = [&](std::size_t k, std::size_t to) {
        for (k = std::max(k, na_pos); k < to;) {
#if defined(__SSE2__)
            // 64 bytes per test: almost all of the input is ASCII.
            if (k + 64 <= n) {
                const auto* q = reinterpret_cast<const __m128i*>(d + k);
                const __m128i v =
                    _mm_or_si128(_mm_or_si128(_mm_loadu_si128(q), _mm_loadu_si128(q + 1)),
                                 _mm_or_si128(_mm_loadu_si128(q + 2), _mm_loadu_si128(q + 3)));
                if (_mm_movemask_epi8(v) == 0) {
                    k += 64;
                    continue;
                }
            }
            if (k + 16 <= n) {
                const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + k));
                if (_mm_movemask_epi8(v) == 0) {
                    k += 16;
                    continue;
                }
            }
#endif
            if (k + 8 <= n) {
                std::uint64_t w;
                std::memcpy(&w, d + k, 8);
                if ((w & 0x8080808080808080ull) == 0) {
                    k += 8;
                    continue;
                }
            }
            if (d[k] < 0x80) {
                ++k;
                continue;
            }
            std::size_t b = k;
            while (b > 0 && !is_space(d[b - 1]) && b > na_end)
                --b;
            std::size_t e = k;
            while (e < n && !is_space(d[e]))
                ++e;
            if (na_begin != npos && b <= na_end + 64) {
                na_end = e;
            } else {
                if (na_begin != npos)
                    na_regions.emplace_back(na_begin, na_end);
                na_begin = b;
                na_end = e;
            }
            k = e;
        }
        na_pos = std::max(na_pos, k);
    };
    const bool want_na = (opts_.enabled & dec_unicode) != 0;
    mask_cache cache;
    cache.high_on = want_na ? ~std::uint64_t{0} : 0;
    for (std::size_t from = 0; from < n;) {
        if (want_na && done > from)
            na_scan(from, done);
        const chunk_hit h = next_events(d, std::max(from, done), n, cache);
        if (h.at >= n)
            break;
        const std::size_t at = h.at;
        if (h.ev.high != 0)
            na_scan(at + static_cast<unsigned>(__builtin_ctzll(h.ev.high)), std::min(n, at + 64));
        std::uint64_t b64 = h.ev.b64;
        std::uint64_t hex = (opts_.enabled & dec_hex) ? h.ev.hex : 0;
        std::uint64_t trig = h.ev.trig;
        for (;;) {
            if (done > at) {
                if (done - at >= 64)
                    break;
                const std::uint64_t keep = ~std::uint64_t{0} << (done - at);
                b64 &= keep;
                hex &= keep;
                trig &= keep;
            }
            const std::uint64_t any = b64 | hex | trig;
            if (any == 0)
                break;
            const unsigned k = static_cast<unsigned>(__builtin_ctzll(any));
            const std::uint64_t bit = std::uint64_t{1} << k;
            std::size_t s = at + k;
            variant_status st = variant_status::ok;
            if (trig & bit) {
                trig &= ~bit;
                st = visit_from(s);
            } else if (b64 & bit) {
                b64 &= ~bit;
                while (s > done && (cls[d[s - 1]] & k_b64))
                    --s;
                st = visit_from(s);
            } else {
                hex &= ~bit;
                // 16 bytes of hex digits and delimiters, at least 10 of them digits
                // ("67:68:70:71:72:7"; not indentation or a run of spaces).
                const unsigned digits = h.ev.hex_digits(k);
                if (digits >= 10) {
                    while (s > done && (cls[d[s - 1]] & k_hexd))
                        --s;
                    while (!is_hex(d[s]))
                        ++s;
                    st = visit_from(s);
                }
            }
            if (st != variant_status::ok)
                return st;
        }
        from = at + 64;
    }
    if (na_begin != npos)
        na_regions.emplace_back(na_begin, na_end);
    // Base64 or hex cut into equal groups by spaces or line breaks ("Z2hw X2Fi ...",
    // a space every 12 characters): the groups joined and decoded as one run.
    if (opts_.enabled & (dec_base64 | dec_hex)) {
        std::string joined;
        variant_status st = variant_status::ok;
        spaced_regions(d, n, [&](std::size_t b, std::size_t e) {
            if (st != variant_status::ok)
                return;
            joined.clear();
            bool all_hex = true;
            for (std::size_t k = b; k < e; ++k)
                if (cls[d[k]] & k_b64) {
                    joined += static_cast<char>(d[k]);
                    all_hex = all_hex && is_hex(d[k]);
                }
            if (!count()) {
                st = variant_status::over_budget;
                return;
            }
            bool useful = false;
            if (all_hex && joined.size() % 2 == 0 && joined.size() >= min_hex_run &&
                (opts_.enabled & dec_hex)) {
                if (decode::hex(joined, decoded))
                    st = binary("hex", b, e, useful);
            } else if ((opts_.enabled & dec_base64) && decode::base64(joined, decoded)) {
                st = binary("base64", b, e, useful);
            }
        });
        if (st != variant_status::ok)
            return st;
    }
    // Context around folded text: a label in look-alike letters ("сard:") belongs with
    // the ASCII value after it.
    constexpr std::size_t context = 128;
    for (auto& [b, e] : na_regions) {
        b = b > context ? b - context : 0;
        e = std::min(n, e + context);
    }
    for (std::size_t k = 1; k < na_regions.size(); ++k) {
        auto& prev = na_regions[k - 1];
        if (na_regions[k].first < prev.second) { // overlap: fold once
            na_regions[k].first = prev.first;
            prev = {0, 0};
        }
    }
    // Whole-buffer views (UTF-16/32, bare quoted-printable, byte lists, one separator
    // between characters, uuencode, ascii85): decode.hpp more_views().
    std::vector<decode::text_view> views;
    decode::more_views(data, decode_room(), views);
    for (auto& v : views) {
        if (!count() || !charge(v.bytes.size()))
            return variant_status::over_budget;
        const auto [o, l] = where(v.begin, v.end);
        auto st = try_decoded(v.bytes, v.step, chain, depth, o, l, c);
        if (st != variant_status::ok)
            return st;
    }
    for (const auto& [b, e] : na_regions) {
        if (e == b)
            continue;
        if (!count())
            return variant_status::over_budget;
        if (decode::fold_unicode(data.substr(b, e - b), decoded)) {
            if (!charge(decoded.size()))
                return variant_status::over_budget;
            const auto [o, l] = where(b, e);
            std::string mine = std::move(decoded);
            auto st = try_decoded(mine, "unicode", chain, depth, o, l, c);
            if (st != variant_status::ok)
                return st;
        }
    }
    if (flips.segs.empty())
        return variant_status::ok;
    stats_.scanned_variants += flips.segs.size();
    return scan_buffer(flips.buf, chain, 0, 0, c, &flips.segs);
}

variant_status variant_scanner::scan(std::string_view data, std::string_view location,
                                     std::vector<variant_finding>& out) {
    stats_.input_bytes += data.size();
    ctx c;
    c.location = location;
    c.out = &out;
    std::string chain;
    return process(data, chain, 0, 0, npos, c);
}

variant_status variant_scanner::scan_url(std::string_view target, std::string_view host,
                                         std::vector<variant_finding>& out) {
    stats_.input_bytes += target.size() + host.size();
    ctx c;
    c.location = "url";
    c.out = &out;
    std::string chain;
    auto st = process(target, chain, 0, 0, npos, c);
    if (st != variant_status::ok || !opts_.decoders)
        return st;

    const std::size_t qpos = target.find('?');
    const std::string_view path = target.substr(0, qpos);
    const std::string_view query =
        qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1);
    std::string buf;
    std::string piece;
    // Path segments, each percent-decoded, one per line.
    if (path.find('%') != std::string_view::npos) {
        std::size_t p = 0;
        while (p <= path.size()) {
            const std::size_t q = std::min(path.find('/', p), path.size());
            decode::percent(path.substr(p, q - p), piece);
            buf += piece;
            buf += '\n';
            p = q + 1;
        }
        if (!charge(buf.size()))
            return variant_status::over_budget;
        chain = "path";
        st = process(buf, chain, 0, 0, npos, c);
        if (st != variant_status::ok)
            return st;
    }
    // Query names and values, form-decoded ('+' is a space), one per line.
    if (query.find_first_of("%+") != std::string_view::npos) {
        buf.clear();
        std::size_t p = 0;
        while (p <= query.size()) {
            const std::size_t q = std::min(query.find('&', p), query.size());
            const std::string_view pair = query.substr(p, q - p);
            const std::size_t eq = pair.find('=');
            decode::percent(pair.substr(0, eq), piece, true);
            buf += piece;
            buf += '\n';
            if (eq != std::string_view::npos) {
                decode::percent(pair.substr(eq + 1), piece, true);
                buf += piece;
                buf += '\n';
            }
            p = q + 1;
        }
        if (!charge(buf.size()))
            return variant_status::over_budget;
        chain = "query";
        st = process(buf, chain, 0, 0, npos, c);
        if (st != variant_status::ok)
            return st;
    }
    // Joined views: a secret cut over path segments or query values.
    for (const bool is_path : {true, false}) {
        joined::view v(is_path ? "path" : "query");
        if (is_path)
            joined::add_path(v, path);
        else
            joined::add_form(v, query);
        st = scan_joined(v, c);
        if (st != variant_status::ok)
            return st;
    }
    // Host labels joined: every run of consecutive labels, without the dots, one per line
    // (a key split across subdomain labels, whatever the registered domain is).
    std::vector<std::string_view> labels;
    for (std::size_t p = 0; p < host.size() && labels.size() < 16;) {
        const std::size_t q = std::min(host.find('.', p), host.size());
        labels.push_back(host.substr(p, q - p));
        p = q + 1;
    }
    if (labels.size() >= 3) {
        buf.clear();
        for (std::size_t a = 0; a + 1 < labels.size(); ++a) {
            std::string joined(labels[a]);
            for (std::size_t b = a + 1; b < labels.size(); ++b) {
                joined += labels[b];
                buf += joined;
                buf += '\n';
            }
        }
        if (!charge(buf.size()))
            return variant_status::over_budget;
        chain = "host";
        st = process(buf, chain, 0, 0, npos, c);
    }
    return st;
}

// Leftovers of a decoder (decode::leftovers): each scanned as "<chain>>leftover", then
// opened when it is itself compressed: the same coding again (a second brotli or DEFLATE
// stream after the first) and any gzip/zstd stream inside it, to a nesting of 3.
variant_status variant_scanner::scan_leftovers(const std::vector<std::string>& parts,
                                               std::string_view coding, const std::string& prefix,
                                               std::size_t nest, ctx& c) {
    std::string chain;
    std::string inflated;
    for (const auto& part : parts) {
        chain = prefix + ">leftover";
        auto st = process(part, chain, 0, 0, npos, c);
        if (st != variant_status::ok)
            return st;
        if (!opts_.decoders || nest >= 3)
            continue;
        const std::string base = chain;
        decode::leftovers sub;
        const auto rc = decode::content(coding, part, decode_room(), inflated, &sub);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        if (rc != decode::inflate_status::unknown && !inflated.empty()) {
            if (!charge(inflated.size()))
                return variant_status::over_budget;
            chain = base + ">" + lower(coding);
            st = process(inflated, chain, 1, 0, npos, c);
            if (st == variant_status::ok && !sub.empty())
                st = scan_leftovers(sub, coding, chain, nest + 1, c);
            if (st != variant_status::ok)
                return st;
        }
        st = scan_embedded(part, base, c, true);
        if (st != variant_status::ok)
            return st;
    }
    return variant_status::ok;
}

// gzip members and zstd frames that start after other bytes ("junk" + gzip stream): the
// magic is 3-4 bytes, so text rarely holds one, and a false start fails within bytes.
variant_status variant_scanner::scan_embedded(std::string_view data, const std::string& prefix,
                                              ctx& c, bool leftover) {
    std::string inflated;
    std::string chain;
    for (const std::size_t off : decode::magic_offsets(data, 17)) {
        if (off == 0 && !leftover)
            continue; // sniffed by the caller
        std::string_view name;
        decode::leftovers left;
        const auto rc = decode::sniffed(data.substr(off), decode_room(), inflated, name, &left);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        if (inflated.empty() && left.empty())
            continue;
        if (!charge(inflated.size()))
            return variant_status::over_budget;
        chain = prefix;
        if (!chain.empty())
            chain += '>';
        if (!leftover)
            chain += "embedded>";
        chain += name;
        auto st = process(inflated, chain, 1, 0, npos, c);
        if (st == variant_status::ok && !left.empty())
            st = scan_leftovers(left, name, chain, 1, c);
        if (st != variant_status::ok)
            return st;
    }
    return variant_status::ok;
}

// True when one of the values a joined finding spans holds a finding of its own where the
// join used it: the secret was that value's, already reported (or let through) on its own,
// and the join only glued a neighbour to it (a token followed by the next word is a longer
// look-alike). A part of a cut secret finds nothing alone, so real joins are kept.
bool variant_scanner::one_value_explains(std::string_view lines,
                                         const std::vector<joined::mark>& marks, std::size_t off,
                                         std::size_t len) {
    auto it = std::upper_bound(marks.begin(), marks.end(), off,
                               [](std::size_t o, const joined::mark& m) { return o < m.at; });
    if (it != marks.begin())
        --it;
    for (; it != marks.end() && it->at < off + len; ++it) {
        if (it->ordinal == joined::no_value)
            continue;
        const std::size_t end = std::next(it) != marks.end() ? std::next(it)->at : lines.size();
        const std::size_t lo = std::max(off, it->at) - it->at;
        const std::size_t hi = std::min(off + len, end) - it->at;
        scratch_.clear();
        if (!scanner_.scan(lines.substr(it->at, end - it->at), scratch_))
            return false;
        for (const auto& f : scratch_)
            if (f.begin < hi && f.end > lo)
                return true;
    }
    return false;
}

// Joined lines: the direct lines with every decoder (a base64 run cut over two fields is
// decoded whole), the window lines with the detectors only (they are the same values in
// other combinations, and decoding each of them again would multiply the decoders' work by
// the window). Findings' offsets are into `lines`.
variant_status variant_scanner::scan_lines(std::string_view lines, std::size_t window_at,
                                           std::string& chain, ctx& c) {
    auto st = process(lines.substr(0, window_at), chain, 0, 0, npos, c);
    if (st != variant_status::ok || window_at == lines.size())
        return st;
    const std::size_t from = c.out->size();
    st = scan_buffer(lines.substr(window_at), chain, 0, npos, c, nullptr);
    for (std::size_t i = from; i < c.out->size(); ++i)
        (*c.out)[i].offset += window_at;
    return st;
}

// A joined view's lines (joined.hpp), charged to the decode budget and scanned with every
// decoder; a finding that spans values is renamed "<view>:<ordinals>".
variant_status variant_scanner::scan_joined(const joined::view& v, ctx& c) {
    std::string buf;
    std::vector<joined::mark> marks;
    std::size_t window_at = 0;
    if (!opts_.joined || !v.lines(buf, marks, window_at))
        return variant_status::ok;
    if (!charge(buf.size()))
        return variant_status::over_budget;
    const std::size_t before = c.out->size();
    std::string chain = "joined:" + v.name();
    const std::size_t prefix = chain.size();
    const auto st = scan_lines(buf, window_at, chain, c);
    std::size_t kept = before;
    for (std::size_t i = before; i < c.out->size(); ++i) {
        auto& f = (*c.out)[i];
        const std::string span = joined::name_span(marks, f.offset, f.length);
        if (!span.empty() && one_value_explains(buf, marks, f.offset, f.length))
            continue;
        if (!span.empty() && f.variant.starts_with("joined:"))
            f.variant =
                v.name() + ":" + span + f.variant.substr(std::min(prefix, f.variant.size()));
        if (kept != i)
            (*c.out)[kept] = std::move(f);
        ++kept;
    }
    c.out->resize(kept);
    return st;
}

variant_status variant_scanner::scan_seam(const message_ends& before, const message_ends& after,
                                          std::string_view location,
                                          std::vector<variant_finding>& out) {
    if (!opts_.joined || before.last.empty() || after.first.empty())
        return variant_status::ok;
    joined::view v("seam");
    for (const auto& s : before.last)
        v.add(s);
    for (const auto& s : after.first)
        v.add(s);
    std::string buf;
    std::vector<joined::mark> marks;
    std::size_t window_at = 0;
    if (!v.lines(buf, marks, window_at))
        return variant_status::ok;
    if (!charge(buf.size()))
        return variant_status::over_budget;
    std::vector<variant_finding> found;
    ctx c;
    c.location = location;
    c.out = &found;
    std::string chain = "seam";
    const auto st = scan_lines(buf, window_at, chain, c);
    const std::size_t split = before.last.size();
    for (auto& f : found) {
        const auto ords = joined::span(marks, f.offset, f.length);
        if (ords.empty() || ords.front() >= split || ords.back() < split ||
            one_value_explains(buf, marks, f.offset, f.length))
            continue; // one side's own
        f.variant = "seam:" + joined::name_span(marks, f.offset, f.length) +
                    f.variant.substr(std::min<std::size_t>(4, f.variant.size()));
        out.push_back(std::move(f));
    }
    return st;
}

variant_status variant_scanner::scan_body(std::string_view body, std::string_view content_type,
                                          std::string_view content_encoding,
                                          std::vector<variant_finding>& out) {
    stats_.input_bytes += body.size();
    ends_ = {};
    ctx c;
    c.location = "body";
    c.out = &out;
    std::string chain;

    // Content-Encoding: codings are listed in the order applied; undo from the last. The
    // bytes as sent are scanned too: whatever a decoder skips (header fields, bytes after
    // the end of a stream) still reaches a detector.
    std::string decoded_body;
    std::string_view data = body;
    struct leftover {
        std::string bytes;
        std::string coding; // of the decoder that left them
        std::string chain;  // the decode chain up to that decoder
    };
    std::vector<leftover> pending;
    {
        std::vector<std::string_view> codings;
        std::size_t p = 0;
        while (p < content_encoding.size()) {
            const std::size_t q = std::min(content_encoding.find(',', p), content_encoding.size());
            const std::string_view cd = trim(content_encoding.substr(p, q - p));
            if (!cd.empty() && lower(cd) != "identity")
                codings.push_back(cd);
            p = q + 1;
        }
        std::string next;
        decode::leftovers left;
        for (auto it = codings.rbegin(); it != codings.rend(); ++it) {
            left.clear();
            const auto rc = decode::content(*it, data, decode_room(), next, &left);
            if (rc == decode::inflate_status::over_limit)
                return variant_status::over_budget;
            if (rc != decode::inflate_status::ok)
                return variant_status::bad_encoding;
            if (!charge(next.size()))
                return variant_status::over_budget;
            decoded_body.swap(next);
            data = decoded_body;
            if (!chain.empty())
                chain += '>';
            chain += lower(*it) == "x-gzip" ? "gzip" : lower(*it);
            for (auto& part : left)
                pending.push_back({std::move(part), std::string(*it), chain});
        }
    }
    const std::string prefix = chain;

    auto st = process(data, chain, 0, 0, npos, c);
    // The decoded body first: a secret in both views is reported with its decode chain.
    if (st == variant_status::ok && data.data() != body.data()) {
        chain.clear();
        st = process(body, chain, 0, 0, npos, c);
    }
    for (const auto& p : pending) {
        if (st != variant_status::ok)
            break;
        st = scan_leftovers({p.bytes}, p.coding, p.chain, 0, c);
    }
    if (st != variant_status::ok || !opts_.decoders)
        return st;

    const std::string ct = lower(trim(content_type.substr(0, content_type.find(';'))));
    const auto step = [&](std::string_view name) {
        chain = prefix;
        if (!chain.empty())
            chain += '>';
        chain += name;
    };
    // Compressed bytes without (another) Content-Encoding, recognised by their magic: a
    // gzip/zlib/zstd file uploaded as is. A stream that breaks off is still scanned as
    // far as it decodes; a bomb is over budget like a declared one.
    {
        std::string inflated;
        std::string_view name;
        decode::leftovers left;
        const auto rc = decode::sniffed(data, decode_room(), inflated, name, &left);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        if (rc != decode::inflate_status::unknown && !inflated.empty()) {
            if (!charge(inflated.size()))
                return variant_status::over_budget;
            step(name);
            st = process(inflated, chain, 1, 0, npos, c);
            if (st != variant_status::ok)
                return st;
        }
        if (rc != decode::inflate_status::unknown && !left.empty()) {
            step(name);
            st = scan_leftovers(left, name, chain, 0, c);
            if (st != variant_status::ok)
                return st;
        }
        st = scan_embedded(data, prefix, c, false);
        if (st != variant_status::ok)
            return st;
    }
    std::string buf;
    std::optional<joined::view> json_view; // parsed once, for this and the joined view
    if ((ct == "application/json" || (ct.size() > 5 && ct.ends_with("+json"))) &&
        (data.find("\\u") != std::string_view::npos ||
         data.find("\\/") != std::string_view::npos)) {
        // Only \u and \/ can change the characters a secret is made of; without them
        // every string is already in the raw pass (the rules read \n, \" and \\ as
        // separators). Keys and strings, unescaped, one per line.
        json_view.emplace("json");
        if (joined::add_json(*json_view, data, &buf)) {
            if (!charge(buf.size()))
                return variant_status::over_budget;
            step("json");
            st = process(buf, chain, 0, 0, npos, c);
        }
    } else if (ct == "application/x-www-form-urlencoded" &&
               data.find_first_of("%+") != std::string_view::npos) {
        std::string piece;
        std::size_t p = 0;
        while (p <= data.size()) {
            const std::size_t q = std::min(data.find('&', p), data.size());
            const std::string_view pair = data.substr(p, q - p);
            const std::size_t eq = pair.find('=');
            decode::percent(pair.substr(0, eq), piece, true);
            buf += piece;
            buf += '\n';
            if (eq != std::string_view::npos) {
                decode::percent(pair.substr(eq + 1), piece, true);
                buf += piece;
                buf += '\n';
            }
            p = q + 1;
        }
        if (!charge(buf.size()))
            return variant_status::over_budget;
        step("form");
        st = process(buf, chain, 0, 0, npos, c);
    } else if (ct == "multipart/form-data" || ct == "multipart/mixed" ||
               ct == "multipart/related") {
        const std::string boundary = param(content_type, "boundary");
        if (!boundary.empty()) {
            joined::view parts("multipart");
            const std::string delim = "--" + boundary;
            std::size_t p = data.find(delim);
            std::string piece;
            while (p != std::string_view::npos && st == variant_status::ok) {
                std::size_t part = p + delim.size();
                if (data.substr(part, 2) == "--")
                    break;
                const std::size_t next = data.find(delim, part);
                std::string_view whole =
                    data.substr(part, (next == std::string_view::npos ? data.size() : next) - part);
                std::size_t hdr_end = whole.find("\r\n\r\n");
                std::size_t body_at = hdr_end + 4;
                if (hdr_end == std::string_view::npos) {
                    hdr_end = whole.find("\n\n");
                    body_at = hdr_end + 2;
                }
                if (hdr_end != std::string_view::npos) {
                    const std::string headers = lower(whole.substr(0, hdr_end));
                    std::string_view pbody = whole.substr(body_at);
                    while (!pbody.empty() && (pbody.back() == '\n' || pbody.back() == '\r'))
                        pbody.remove_suffix(1);
                    const std::size_t cte = headers.find("content-transfer-encoding:");
                    std::string_view value = pbody;
                    if (cte != std::string::npos) {
                        std::string_view val = std::string_view(headers).substr(cte + 26);
                        val = trim(val.substr(0, val.find('\n')));
                        bool ok = false;
                        std::string_view name;
                        if (val == "base64") {
                            ok = decode::base64(pbody, piece);
                            name = "multipart>base64";
                        } else if (val == "quoted-printable") {
                            ok = decode::quoted_printable(pbody, piece);
                            name = "multipart>qp";
                        }
                        if (ok) {
                            if (!charge(piece.size()))
                                return variant_status::over_budget;
                            step(name);
                            st = process(piece, chain, 0, 0, npos, c);
                            value = piece;
                        }
                    }
                    parts.add(value);
                }
                p = next;
            }
            ends_ = joined::ends_from(parts);
            if (st == variant_status::ok)
                st = scan_joined(parts, c);
        }
    } else if (ct == "text/event-stream") {
        // Each event's data lines concatenated: a token split over two data: lines.
        const auto events = joined::sse_events(data);
        const bool any = !events.empty();
        for (const auto& e : events) {
            buf += e;
            buf += '\n';
        }
        if (any) {
            if (!charge(buf.size()))
                return variant_status::over_budget;
            step("sse");
            st = process(buf, chain, 0, 0, npos, c);
        }
    }
    if (st != variant_status::ok)
        return st;
    return scan_body_joined(data, ct, c, json_view ? &*json_view : nullptr);
}

// The joined views of a body's values (joined.hpp), by Content-Type or, for JSON, by shape:
// an agent does not have to say application/json for its tool call to be JSON.
variant_status variant_scanner::scan_body_joined(std::string_view data, std::string_view ct, ctx& c,
                                                 const joined::view* json) {
    if (ct.starts_with("multipart/"))
        return variant_status::ok; // joined part by part above
    const std::size_t first = data.find_first_not_of(" \t\r\n");
    const bool json_shape =
        first != std::string_view::npos && (data[first] == '{' || data[first] == '[');
    if (ct == "application/x-www-form-urlencoded") {
        joined::view v("form");
        joined::add_form(v, data);
        ends_ = joined::ends_from(v);
        return scan_joined(v, c);
    }
    if (ct == "text/event-stream") {
        joined::view v("sse");
        joined::add_sse(v, data);
        ends_ = joined::ends_from(v);
        return scan_joined(v, c);
    }
    if (json && json->size() > 0) {
        ends_ = joined::ends_from(*json);
        return scan_joined(*json, c);
    }
    if (json_shape || ct == "application/json" || (ct.size() > 5 && ct.ends_with("+json"))) {
        joined::view v("json");
        if (joined::add_json(v, data)) {
            ends_ = joined::ends_from(v);
            return scan_joined(v, c);
        }
    }
    ends_ = joined::ends_of_words(data);
    return variant_status::ok;
}

} // namespace sluice::dlp
