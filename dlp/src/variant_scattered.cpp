// Base64 or hex cut into groups by any bytes outside the alphabet ("Z2hw.X2Fi.", "Z2h
// w:X2", groups of 1 to 3 characters, a JSON "\n" or "\t" and indentation between them, a
// carriage return alone, a word glued to the first group): the receiver strips what is not
// base64 and decodes the rest, so this pass does the same. spaced() (equal groups between
// whitespace) and the runs of the event loop see only some of these shapes; the class is
// "alphabet characters with other bytes between them", and this pass takes it whole:
// - regions: 64 bytes of text holding 6 or more alphabet bytes, capitals or digits among
//   them at base64's (or hex's) rate, not in words (may_hold_groups), merged when close,
//   with a margin either side for the groups at the edges;
// - per region the alphabet characters joined, escape letters ("\n", "\u00e9") left out;
//   lines of 16 or more between single line breaks are one piece (a wrapped run), and a
//   piece longer than 2 * edge is kept as its first and last `edge` characters: the event
//   loop decodes a run whole at every alignment, and only its ends meet other pieces;
// - skipped: a region of one piece, lower-case words (prose, code), and copies a lossy
//   step made of a decode (binary folded to text);
// - decoded at the four alignments (a prefix of any length shifts the quanta, and each
//   stretch between two stray characters is aligned in one of the four), as hex at two when
//   nine in ten characters are hex digits, and with '-' and '_' as separators as well as
//   letters when the region holds any. Text and compressed streams go through binary();
//   binary bytes are scanned at the next depth as they are, like binary_run.
// Limits: groups with more than 9 other bytes per character, and a token cut between two
// regions (about 100 bytes or more of text that is not base64 between its groups), are not
// joined.
// Cost: each alignment decodes 3/4 of the joined characters, charged to the decode budget;
// a region's join is at most its own bytes. Not thread safe: one walk per call.
#include "sluice/dlp/variants.hpp"

#include "sluice/dlp/decode.hpp"

#include "candidate_runs.hpp" // the byte classes (an anonymous namespace)
#include "variant_walk.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace sluice::dlp {

namespace {

using variant_detail::npos;

constexpr std::size_t edge = 512;           // characters kept at each end of a long piece
constexpr std::size_t min_scattered = 24;   // joined characters worth decoding (18 bytes)
constexpr std::size_t min_noise_bytes = 24; // binary decodes shorter than this are dropped

inline bool is_std64(unsigned char ch) noexcept {
    return (cls[ch] & k_b64) && ch != '-' && ch != '_';
}

// The bytes of d[k, k + len), len <= 16, as bit masks: alphabet bytes and, among them,
// capitals, small letters and digits; the letter after a backslash is none ("\\n" between
// groups is no character of theirs).
struct block_masks {
    unsigned alpha = 0, upper = 0, lower = 0, digit = 0, text = 0;
};

inline block_masks mask_block(const unsigned char* d, std::size_t k, std::size_t len) noexcept {
    block_masks m;
    unsigned bs = 0;
#if defined(__SSE2__)
    if (len == 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + k));
        const auto mask = [](__m128i x) { return static_cast<unsigned>(_mm_movemask_epi8(x)); };
        m.upper = mask(in_range(v, 'A', 'Z'));
        m.lower = mask(in_range(v, 'a', 'z'));
        m.digit = mask(in_range(v, '0', '9'));
        m.alpha = m.upper | m.lower | m.digit |
                  mask(_mm_or_si128(_mm_or_si128(eq(v, '+'), eq(v, '/')),
                                    _mm_or_si128(eq(v, '-'), eq(v, '_'))));
        bs = mask(eq(v, '\\'));
        m.text = mask(_mm_or_si128(_mm_or_si128(in_range(v, 0x20, 0x7e), eq(v, '\t')),
                                   _mm_or_si128(eq(v, '\n'), eq(v, '\r'))));
    } else
#endif
        for (std::size_t x = 0; x < len; ++x) {
            const unsigned char ch = d[k + x];
            m.upper |= static_cast<unsigned>(ch >= 'A' && ch <= 'Z') << x;
            m.lower |= static_cast<unsigned>(ch >= 'a' && ch <= 'z') << x;
            m.digit |= static_cast<unsigned>(ch >= '0' && ch <= '9') << x;
            m.alpha |= static_cast<unsigned>((cls[ch] & k_b64) != 0) << x;
            bs |= static_cast<unsigned>(ch == '\\') << x;
            m.text |= static_cast<unsigned>((ch >= 0x20 && ch < 0x7f) || ch == '\t' || ch == '\n' ||
                                            ch == '\r')
                      << x;
        }
    const unsigned keep = ~((bs << 1) | (k > 0 && d[k - 1] == '\\' ? 1u : 0u)) & 0xFFFFu;
    m.alpha &= keep, m.upper &= keep, m.lower &= keep, m.digit &= keep;
    return m;
}

// Set bits of x without a call (the build targets x86-64 without POPCNT, where
// __builtin_popcount calls libgcc).
inline int bits(std::uint64_t x) noexcept {
    x = x - ((x >> 1) & 0x5555555555555555u);
    x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Fu;
    return static_cast<int>((x * 0x0101010101010101u) >> 56);
}

// Capitals and digits in d[k, k + len), len <= 16, as a bit mask (escaped letters too: an
// upper bound of mask_block's).
inline unsigned strong_mask(const unsigned char* d, std::size_t k, std::size_t len) noexcept {
#if defined(__SSE2__)
    if (len == 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + k));
        return static_cast<unsigned>(
            _mm_movemask_epi8(_mm_or_si128(in_range(v, 'A', 'Z'), in_range(v, '0', '9'))));
    }
#endif
    unsigned m = 0;
    for (std::size_t x = 0; x < len; ++x)
        m |= static_cast<unsigned>((d[k + x] >= 'A' && d[k + x] <= 'Z') ||
                                   (d[k + x] >= '0' && d[k + x] <= '9'))
             << x;
    return m;
}

// The masks of the last four blocks (64 bytes), the newest in the high 16 bits.
struct window_masks {
    std::uint64_t alpha = 0, upper = 0, lower = 0, digit = 0, text = 0;
    void push(const block_masks& m) noexcept {
        text = (text >> 16) | (std::uint64_t{m.text} << 48);
        alpha = (alpha >> 16) | (std::uint64_t{m.alpha} << 48);
        upper = (upper >> 16) | (std::uint64_t{m.upper} << 48);
        lower = (lower >> 16) | (std::uint64_t{m.lower} << 48);
        digit = (digit >> 16) | (std::uint64_t{m.digit} << 48);
    }
};

// Whether 64 bytes may hold base64 in groups: 48 bytes or more of text (a body or a
// decoded buffer that is binary is left to the event loop), 6 or more alphabet bytes (base64 with
// up to 9 other bytes per character has that many), 30% or more of them capitals or digits, 2
// capitals (or, for hex, 40% digits), and where two alphabet bytes are next to each other, 60% or
// fewer of the pairs of one kind (capitals, small letters, digits). Of base64 about 40% (text) to
// 56% (random bytes) of the characters are capitals or digits and 36% of the pairs of one kind;
// prose and code have few capitals and digits, and words ("LATIN CAPITAL LETTER", "return
// self") are pairs of one kind.
inline bool may_hold_groups(const window_masks& w) noexcept {
    if (bits(w.text) < 48)
        return false;
    const int n = bits(w.alpha), strong = bits(w.upper | w.digit), digits = bits(w.digit);
    const bool hex = bits(w.upper) < 2;
    if (hex && digits * 10 < n * 4) // capitals, or digits at hex's rate
        return false;
    if (n < 6 || strong * 10 < n * 3)
        return false;
    const int pairs = bits(w.alpha & (w.alpha >> 1));
    const int same =
        bits((w.upper & (w.upper >> 1)) | (w.lower & (w.lower >> 1)) | (w.digit & (w.digit >> 1)));
    return hex || pairs < 6 || same * 10 <= pairs * 6;
}

// Calls on_region(begin, end) for each region: every 64 bytes (four 16-byte blocks, in
// steps of one) that may_hold_groups, with `margin` bytes either side, merged when they
// overlap or nearly do.
template <class OnRegion>
void scattered_regions(const unsigned char* d, std::size_t n, OnRegion&& on_region) {
    // A window of sparse groups (one character in six bytes and fewer) may fail the test
    // by chance: a margin of most of a window keeps the groups at the ends of a region.
    constexpr std::size_t margin = 48;
    std::size_t rb = npos, re = 0;
    const auto dense = [&](std::size_t k, std::size_t len) {
        const std::size_t b = k > margin ? k - margin : 0;
        const std::size_t e = std::min(n, k + len + margin);
        if (rb != npos && b <= re) {
            re = e;
            return;
        }
        if (rb != npos)
            on_region(rb, re);
        rb = b, re = e;
    };
    // Most text has fewer than 2 capitals and digits in 64 bytes: those are counted first,
    // and a block's other masks made only when a window holding it gets that far.
    std::array<block_masks, 4> ring{};
    std::array<bool, 4> made{};
    std::uint64_t strong = 0;
    for (std::size_t k = 0, idx = 0; k < n; k += 16, ++idx) {
        const std::size_t len = std::min<std::size_t>(16, n - k);
        strong = (strong >> 16) | (std::uint64_t{strong_mask(d, k, len)} << 48);
        made[idx % 4] = false;
        if (bits(strong) < 2)
            continue;
        window_masks w; // oldest block first: push() puts the newest in the high bits
        for (std::size_t t = 4; t-- > 0;) {
            if (idx < t) {
                w.push(block_masks{}); // before the buffer
                continue;
            }
            const std::size_t j = idx - t, at = j * 16;
            if (!made[j % 4]) {
                ring[j % 4] = mask_block(d, at, std::min<std::size_t>(16, n - at));
                made[j % 4] = true;
            }
            w.push(ring[j % 4]);
        }
        const std::size_t from = k >= 48 ? k - 48 : 0;
        if (may_hold_groups(w))
            dense(from, k + len - from);
    }
    if (rb != npos)
        on_region(rb, re);
}

// Bytes an escape at d[k] == '\\' takes ("\n" 2, "\u00e9" 6, "\x41" 4), 0 for none.
inline std::size_t escape_len(const unsigned char* d, std::size_t k, std::size_t e) noexcept {
    if (k + 1 >= e)
        return 0;
    const unsigned char x = d[k + 1];
    if (std::string_view("nrtfbv0\"'\\/").find(static_cast<char>(x)) != std::string_view::npos)
        return 2;
    const std::size_t digits = x == 'u' ? 4 : x == 'x' ? 2 : 0;
    if (digits == 0 || k + 2 + digits > e)
        return 0;
    for (std::size_t y = k + 2; y < k + 2 + digits; ++y)
        if (!is_hex(d[y]))
            return 0;
    return 2 + digits;
}

} // namespace

// The join of d[b, e) (see the top of the file) into `out` when not null, and its counts.
// `url` keeps '-' and '_' as characters. A piece followed by one line break and more
// characters, when it is min_run or longer, is a line of a wrapped run (wrapped_run): the
// run is one piece, cut to its ends as a whole.
variant_scanner::walk::join_counts variant_scanner::walk::scattered_join(std::size_t b,
                                                                         std::size_t e, bool url,
                                                                         std::string* out,
                                                                         bool escapes) const {
    join_counts jc;
    std::size_t lower_run = 0, upper_run = 0,
                line = 0;        // line: characters since the piece's last line break
    int last_kind = -1;          // of the last character joined: 0 capital, 1 small letter, 2 other
    std::size_t piece_at = npos; // where the current piece (a run) starts in `out`
    std::size_t skip_at = npos, skip_to = npos; // the middle of a long line, not read
    bool in_piece = false;
    const auto letter = [&](unsigned char ch) {
        return url ? (cls[ch] & k_b64) != 0 : is_std64(ch);
    };
    const auto end_piece = [&] {
        if (out != nullptr && in_piece)
            if (const std::size_t len = out->size() - piece_at; len > 2 * edge)
                out->erase(piece_at + edge, len - 2 * edge); // its first and last `edge`
        in_piece = false;
    };
    for (std::size_t k = b; k < e;) {
        const unsigned char ch = d[k];
        jc.has_url = jc.has_url || ch == '-' || ch == '_';
        jc.has_std = jc.has_std || ch == '+' || ch == '/';
        jc.text += (ch >= 0x20 && ch < 0x7f) || ch == '\t' || ch == '\r' || ch == '\n';
        if (letter(ch)) {
            if (line == 0) {
                // A long line: its middle is the event loop's (a run it decodes whole), and
                // reading it here a character at a time would cost as much again.
                std::size_t re = scan_alphabet_run(d, k, e).end;
                if (!url)
                    re = static_cast<std::size_t>(
                        std::find_if(d + k, d + re, [](unsigned char x) { return !is_std64(x); }) -
                        d);
                if (re - k > 4 * edge) {
                    skip_at = k + edge;
                    skip_to = re - edge;
                }
            }
            if (k == skip_at) {
                jc.has_url = jc.has_url || std::any_of(d + k, d + skip_to, [](unsigned char x) {
                                 return x == '-' || x == '_';
                             });
                jc.text += skip_to - k - 1; // counted once above, for d[k]
                line += skip_to - k;
                k = skip_to;
                continue;
            }
            if (!in_piece) {
                in_piece = true;
                piece_at = out != nullptr ? out->size() : 0;
                ++jc.pieces;
            }
            if (out != nullptr)
                *out += static_cast<char>(ch);
            ++jc.chars, ++line;
            const int kind = ch >= 'A' && ch <= 'Z' ? 0 : ch >= 'a' && ch <= 'z' ? 1 : 2;
            jc.upper += kind == 0;
            jc.lower += kind == 1;
            jc.digits += ch >= '0' && ch <= '9';
            jc.hex += is_hex(ch);
            jc.turns += last_kind >= 0 && kind != last_kind;
            last_kind = kind;
            lower_run = kind == 1 ? lower_run + 1 : 0;
            upper_run = kind == 0 ? upper_run + 1 : 0;
            jc.upper_words += upper_run == 6 ? 6 : upper_run > 6 ? 1 : 0;
            jc.lower_words += lower_run == 5 ? 5 : lower_run > 5 ? 1 : 0;
            ++k;
            continue;
        }
        lower_run = 0, upper_run = 0;
        if (const std::size_t lb = escapes || ch != '\\' ? line_break_end(d, k, e) : k;
            in_piece && line >= min_run && lb != k && lb < e && letter(d[lb])) {
            line = 0;
            jc.text += lb - k - 1; // the rest of the break ("\\r\\n"), all text
            k = lb;
            continue;
        }
        end_piece();
        line = 0;
        const std::size_t esc = ch == '\\' && escapes ? escape_len(d, k, e) : 0;
        jc.text += esc > 1 ? esc - 1 : 0; // an escape is text
        k += esc != 0 ? esc : 1;
    }
    end_piece();
    return jc;
}

// Whether a region's join is worth decoding. A piece alone is a run the event loop decoded.
// A join of hex digits only needs digits and letters both (of text the high nibble is a
// digit). Base64 is text where it is sent, has capitals and small letters each in one
// character of eight or more (of random bytes 41% each, of capitals' base64 18% small
// letters; headings and tables in capitals have few), few lower-case words (5 letters or
// more) or words in capitals (6 or more, as the names in a codec table), and changes
// between capitals, small letters and digits at about two characters of three (of random
// bytes 0.64, of text about as often); identifiers and prose change at one in five or fewer.
bool variant_scanner::walk::join_counts::worth(std::size_t region) const noexcept {
    if (chars < min_scattered || pieces < 2 || text * 4 < region * 3)
        return false;
    // Hex: digits (the high nibble of text is one) and letters both.
    if (hex * 10 >= chars * 9)
        return hex >= min_hex_run && digits * 5 >= chars && (chars - digits) * 8 >= chars;
    return upper * 8 >= chars && lower * 8 >= chars && lower_words * 4 < chars &&
           upper_words * 3 < chars && turns * 5 >= (chars - 1) * 2;
}

variant_status variant_scanner::walk::scattered() {
    if ((vs.opts_.enabled & (dec_base64 | dec_scattered)) != (dec_base64 | dec_scattered))
        return variant_status::ok;
    // A copy that a lossy step made after another step (binary bytes folded to text, as
    // "base64>unicode" is): what looks like groups there was never sent.
    if (const std::size_t gt = chain.find('>');
        gt != std::string::npos && variant_detail::lossy(std::string_view(chain).substr(gt + 1)))
        return variant_status::ok;
    std::string joined;
    variant_status st = variant_status::ok;
    scattered_regions(d, n, [&](std::size_t b, std::size_t e) {
        if (st != variant_status::ok)
            return;
        const join_counts jc = scattered_join(b, e, true, nullptr);
        if (!jc.worth(e - b))
            return;
        // With '-' and '_' as characters (base64url), and as separators when there are any;
        // only as separators next to '+' or '/' (the standard alphabet's, which base64url
        // has none of).
        for (const bool url : {true, false}) {
            if (st != variant_status::ok || (!url && !jc.has_url))
                break;
            if (url && jc.has_url && jc.has_std)
                continue;
            joined.clear();
            scattered_join(b, e, url, &joined);
            if (joined.size() >= min_scattered)
                st = scattered_decode(joined, b, e);
        }
        // A backslash that is no escape ("\\b" or "\\0" in base64 that is not in a string):
        // the letter after it is the receiver's, once the backslash is stripped.
        if (st == variant_status::ok && std::find(d + b, d + e, '\\') != d + e) {
            joined.clear();
            scattered_join(b, e, true, &joined, false);
            if (joined.size() >= min_scattered)
                st = scattered_decode(joined, b, e);
        }
    });
    return st;
}

// The hex digits of `joined` when nine in ten of its characters are (a label at either end
// is not), decoded at both alignments (a stray digit shifts the pairs).
variant_status variant_scanner::walk::scattered_hex(std::string_view joined, std::size_t b,
                                                    std::size_t e) {
    const std::size_t digits = static_cast<std::size_t>(
        std::count_if(joined.begin(), joined.end(), [](char ch) { return is_hex(ch); }));
    if (!(vs.opts_.enabled & dec_hex) || digits < min_hex_run || digits * 10 < joined.size() * 9)
        return variant_status::ok;
    std::string hex;
    std::copy_if(joined.begin(), joined.end(), std::back_inserter(hex),
                 [](char ch) { return is_hex(ch); });
    for (std::size_t k = 0; k < 2; ++k) {
        if (!count())
            return variant_status::over_budget;
        const std::size_t len = (hex.size() - k) / 2 * 2;
        bool useful = false;
        if (decode::hex(std::string_view(hex).substr(k, len), decoded))
            if (auto st = binary("hex", b, e, useful); st != variant_status::ok || useful)
                return st;
    }
    return variant_status::ok;
}

// `joined` (alphabet characters only) decoded as hex (scattered_hex) and as base64 at each
// alignment.
variant_status variant_scanner::walk::scattered_decode(std::string_view joined, std::size_t b,
                                                       std::size_t e) {
    bool useful = false;
    if (auto st = scattered_hex(joined, b, e); st != variant_status::ok)
        return st;
    const auto [o, l, at_end] = where(b, e);
    for (std::size_t k = 0; k < 4; ++k) {
        if (!count())
            return variant_status::over_budget;
        if (!decode::base64(joined.substr(k), decoded))
            continue;
        if (mostly_printable(decoded) || decode::looks_compressed(decoded) ||
            decode::starts_compressed(decoded)) {
            auto st = binary("base64", b, e, useful);
            if (st != variant_status::ok)
                return st;
            continue;
        }
        if (decoded.size() < min_noise_bytes)
            continue;
        if (!vs.charge(decoded.size()))
            return variant_status::over_budget;
        std::string mine = std::move(decoded);
        auto st = vs.try_decoded(mine, "base64", chain, depth, o, l, at_end, b, e - b, c);
        if (st != variant_status::ok)
            return st;
    }
    return variant_status::ok;
}

} // namespace sluice::dlp
