// The runs the candidate pass finds (variant_candidates.cpp), decoded: base64 at the
// alignments a glued word leaves, wrapped or split at its separators, hex whole or at a
// stray digit's alignments, base32, and tokens written backwards, in ROT13 or without
// their prefix. Binary output opens compressed streams or is dropped as noise; what
// decodes goes to the next depth (variant_scanner::try_decoded). Not thread safe: one
// scanner per thread (variants.hpp).
#include "sluice/dlp/variants.hpp"

#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/decode.hpp"

#include "candidate_runs.hpp" // the classification and its runs (an anonymous namespace)
#include "variant_detail.hpp"
#include "variant_walk.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace sluice::dlp {

using variant_detail::lossy;

// Binary decoders (base64, hex): open compressed streams, drop binary noise.
variant_status variant_scanner::walk::binary(std::string_view step, std::size_t b, std::size_t e,
                                             bool& useful) {
    useful = false;
    if (!vs.charge(decoded.size()))
        return variant_status::over_budget;
    const auto [o, l, at_end] = where(b, e);
    if (decode::looks_compressed(decoded)) {
        const bool zstd = static_cast<unsigned char>(decoded[0]) == 0x28;
        bool cut = false;
        const auto rc = decode::content(zstd ? "zstd" : "deflate", decoded, vs.decode_room(),
                                        inflated, nullptr, &cut);
        const bool gz = rc == decode::inflate_status::error && !zstd && !cut;
        const auto rg =
            gz ? decode::content("gzip", decoded, vs.decode_room(), inflated, nullptr, &cut) : rc;
        if (rg == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        if (cut && at_end && !lossy(chain))
            vs.note_cut(std::min(c.bound.at(b), o + l), o + l);
        // A stream that breaks off, or is followed by other bytes (the next line of a
        // multipart body decoded onto its end), is scanned as far as it decodes.
        if (rg == decode::inflate_status::ok ||
            (rg == decode::inflate_status::error && !inflated.empty())) {
            if (!vs.charge(inflated.size()))
                return variant_status::over_budget;
            useful = true;
            const std::size_t saved = chain.size();
            if (!chain.empty())
                chain += '>';
            chain += step;
            std::string mine = std::move(inflated);
            // Named as sniffed() names them: a zlib stream is "deflate".
            const char* coding = zstd ? "zstd" : gz ? "gzip" : "deflate";
            auto st =
                vs.try_decoded(mine, coding, chain, depth + 1, o, l, cut && at_end, b, e - b, c);
            chain.resize(saved);
            return st;
        }
    }
    if (!decode::looks_compressed(decoded) && decode::starts_compressed(decoded)) {
        // bzip2, xz or lzma: opened at the next depth (open_compressed), which names
        // the coding, and scanned as they are if they do not decode.
        useful = true;
        std::string mine = std::move(decoded);
        return vs.try_decoded(mine, step, chain, depth, o, l, at_end, b, e - b, c);
    }
    if (!mostly_printable(decoded)) {
        // Binary from hex (a key store, a blob with a key's base64 appended): the
        // next depth looks for encoded text inside it. Short runs (hashes) are noise.
        // Not `useful`: the other alignment of a misaligned run is still tried.
        if (step != "hex" || decoded.size() < min_binary_run)
            return variant_status::ok;
        std::string mine = std::move(decoded);
        return vs.try_decoded(mine, step, chain, depth, o, l, at_end, b, e - b, c);
    }
    useful = true;
    text_b = b, text_e = e;                // binary_run does not decode these bytes again
    std::string mine = std::move(decoded); // the recursion reuses `decoded`
    return vs.try_decoded(mine, step, chain, depth, o, l, at_end, b, e - b, c);
}

// Hex in [a, b) (all hex digits, 32 or more), decoded at the alignments a stray digit
// glued on either side leaves: even length whole, then without both end digits; odd
// length without its last digit, then without its first.
variant_status variant_scanner::walk::hex_span(std::size_t a, std::size_t b, bool& useful) {
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
}

// Base64 in the alphabet run [b, e) (e after its padding) whose first 16 characters
// lie in [b, limit): decoded from b when those characters read as text (plausible_b64),
// else from b+1, b+2 or b+3 (plausible_shifted_b64), for base64 glued to a word whose
// length is not a multiple of 4 ("upl<base64>"; a glued word of 4 costs 3 of the 12
// bytes, which plausible_b64 tolerates). Stops at the first alignment whose decoding is
// useful and sets `start` to it. The shifted alignments cost a 4-16 character test;
// they count as candidates only when it passes.
variant_status variant_scanner::walk::base64_aligned(std::size_t b, std::size_t limit,
                                                     std::size_t e, std::size_t& start,
                                                     bool& useful) {
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
}

void variant_scanner::walk::add_flip(std::string_view bytes, std::string_view step, std::size_t o,
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
}

// Base32 (RFC 4648 sections 6 and 7) in an alphabet run [b, j) (e after '=' padding),
// and a run that may be a token written backwards or in ROT13: 20-256 bytes mixing
// capitals, small letters and digits on one line (identifiers and words rarely do;
// base64 blobs are longer). Both copies go to the next depth as they are.
variant_status variant_scanner::walk::run_transforms(std::size_t b, std::size_t j, std::size_t e,
                                                     bool all_hex, bool wrapped) {
    const std::size_t len = j - b;
    if (len >= min_base32_run && !all_hex) {
        bool upper = false, lower = false, ok = true, hex32 = true;
        for (std::size_t k = b; k < j && ok; ++k) {
            const unsigned char ch = d[k];
            upper = upper || (ch >= 'A' && ch <= 'Z');
            lower = lower || (ch >= 'a' && ch <= 'z');
            ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                 ch == '\r' || ch == '\n';
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
        const auto [o, l, _] = where(b, j);
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
    const auto [o, l, _] = where(b, j);
    for (const std::string_view step : {"reverse", "rot13"}) {
        if (!count() || !vs.charge(len))
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
}

variant_status variant_scanner::walk::base64_run(const alpha_run& r) {
    if (!count())
        return variant_status::over_budget;
    bool useful = false;

    // Most 16+ runs in text are identifiers and paths: decode 16 characters
    // first and drop the run when those 12 bytes are not text at any of the 4
    // alignments (a secret's base64 starts at the run's start or just after a
    // word glued to it; binary payloads are dropped anyway).
    std::size_t start = r.i;
    auto st = base64_aligned(r.i, r.wrapped ? r.first_line_end : r.j, r.end, start, useful);
    // What looked like wrapping may be one line followed by unrelated text ("--boundary"):
    // the first line on its own too.
    if (st == variant_status::ok && r.wrapped && useful)
        st = base64_prefix(start, r.first_line_end);
    // Or the wrapped lines followed by one unrelated line (a multipart boundary after
    // unpadded base64), whose bytes would be decoded onto the end of the secret:
    // everything before the last line on its own.
    if (st == variant_status::ok && r.wrapped && r.last_break != r.first_line_end)
        st = base64_prefix(start, r.last_break);
    if (st == variant_status::ok && !useful && (r.has_sep || r.wrapped))
        st = pieces(r);
    if (st == variant_status::ok && !useful && r.j - r.i > min_hex_run)
        st = glued_hex(r, useful);
    // Binary at the other alignments whatever this one decoded to: a text decoy at one
    // alignment (or a short compressed stream, which is all binary() scans of it) would
    // hide the bytes at the shifted one, where the receiver strips a glued word.
    if (st == variant_status::ok && r.j - r.i >= min_binary_run)
        st = binary_run(r);
    return st;
}

variant_status variant_scanner::walk::base64_prefix(std::size_t start, std::size_t stop) {
    if (!count())
        return variant_status::over_budget;
    if (!decode::base64(data.substr(start, stop - start), decoded))
        return variant_status::ok;
    bool useful = false;
    return binary("base64", start, stop, useful);
}

// Misaligned by a prefix ("/upload/<base64>", "key-<base64>"), or a
// line break that was not wrapping (a hex line, then "--boundary"):
// try the pieces between separators on their own.
variant_status variant_scanner::walk::pieces(const alpha_run& r) {
    const std::size_t i = r.i, j = r.j, end = r.end;
    std::array<suffix_memo, 4> memo{};
    b64_count cnt;
    cnt.pos = i;
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
                auto st = p == i ? base64_aligned(p, q, e1, ps, u2)
                                 : piece_to_end(p, q, end, cnt, memo, u2);
                if (st == variant_status::ok && !u2 && qe != e1)
                    st = base64_aligned(p, q, qe, ps, u2);
                if (st != variant_status::ok)
                    return st;
            }
        }
        p = q + 1;
    }
    return variant_status::ok;
}

// What a tail that cannot read as text (piece_to_end) from `b` to the run's end `e` still
// needs, judged from its first 4 KiB (left in `decoded` for `head`):
// - none: they start no stream sniffed() opens, as false zlib or .lzma header shapes in
//   random base64 (one every few thousand pieces) do not;
// - head: a zlib, gzip or zstd stream ends or fails inside them, so binary() decodes the
//   same from them as from the whole tail;
// - whole: anything else (a stream that may go on, a bzip2, xz or lzma stream).
// Whether the base64 from `b` (to `e`) decodes to bytes that start a compressed stream
// (decode::starts_compressed), decoded as decode::base64 reads it: a line break or an
// escaped one ("\\n") among the first characters is skipped, as the raw 16-character
// test (shifted_compressed_b64) does not. A red-team find: a zlib header behind "\\n".
bool variant_scanner::walk::starts_stream(std::size_t b, std::size_t e) const {
    std::string first;
    return decode::base64(data.substr(b, std::min<std::size_t>(e - b, 64)), first) &&
           decode::starts_compressed(first);
}

variant_scanner::walk::tail_need variant_scanner::walk::probe_tail(std::size_t b, std::size_t e) {
    constexpr std::size_t probe_chars = 4096 / 3 * 4;
    constexpr std::size_t limit = 64 * 1024;
    if (e - b <= probe_chars)
        return tail_need::whole;
    if (!decode::base64(data.substr(b, probe_chars), decoded))
        return tail_need::none;
    std::string out;
    bool cut = false;
    if (decode::looks_compressed(decoded)) {
        // binary()'s two tries, on these bytes alone.
        const bool zstd = static_cast<unsigned char>(decoded[0]) == 0x28;
        auto rc = decode::content(zstd ? "zstd" : "deflate", decoded, limit, out, nullptr, &cut);
        if (rc == decode::inflate_status::error && !zstd && !cut)
            rc = decode::content("gzip", decoded, limit, out, nullptr, &cut);
        return rc == decode::inflate_status::over_limit || cut ? tail_need::whole : tail_need::head;
    }
    std::string_view name;
    if (decode::sniffed(decoded, limit, out, name, nullptr, &cut) !=
        decode::inflate_status::unknown)
        return tail_need::whole;
    // sniffed()'s raw DEFLATE trial (on the first 512 bytes' look) says unknown also for a
    // stream these bytes cut short before it produced 64 bytes: only one that fails inside
    // them is none.
    decode::stream_decoder raw("raw-deflate");
    out.clear();
    const auto rc = raw.feed(decoded, limit, out);
    return rc == decode::inflate_status::error && out.size() < 64 ? tail_need::none
                                                                  : tail_need::whole;
}

// The piece [p, q) of a split run (`cnt` counting its base64 characters), decoded to the
// run's end at the alignments base64_aligned tries. Such a decode is the tail of an
// earlier one at the same alignment (the same bit stream, whole characters later), and
// text_count of a tail is at most the whole's: a tail too long to be 80% text by that
// bound (mostly_printable) that starts no stream cannot be useful and is not decoded
// again (probe_tail). Each decode that happens is then at most 5/4 of the text of the one
// before, so a run split every few characters (random base64 has a '/' every 64) costs
// about twice its length per alignment instead of its length per piece, which refused
// clean base64 files of 80 KiB and more 413 decode_budget.
std::size_t variant_scanner::walk::chars_before(b64_count& cnt, std::size_t p) const noexcept {
    if (p > cnt.pos) {
        cnt.chars += b64_chars(d, cnt.pos, p);
        cnt.pos = p;
    }
    return cnt.chars;
}

variant_status variant_scanner::walk::piece_to_end(std::size_t p, std::size_t q, std::size_t end,
                                                   b64_count& cnt, std::array<suffix_memo, 4>& memo,
                                                   bool& useful) {
    useful = false;
    for (std::size_t k = 0; k < 4 && !useful && p + k + min_run <= q; ++k) {
        if (!(k == 0 ? plausible_b64(d + p) : plausible_shifted_b64(d + p + k)))
            continue;
        if (k != 0 && !count())
            return variant_status::over_budget;
        const std::size_t at = chars_before(cnt, p + k);
        // A decode starting on the letter of an escape ("\\n") reads it as a character:
        // not the tail of an earlier decode, nor a whole later ones are tails of.
        const bool own = p + k > 0 && d[p + k - 1] == '\\';
        suffix_memo& m = memo[own ? 0 : at % 4];
        const std::size_t dropped = (at - m.chars_at) / 4 * 3;
        const std::size_t size = m.size > dropped + 3 ? m.size - dropped - 3 : 0;
        if (!own && m.valid && size * 4 > (m.text + 4) * 5) {
            const tail_need need =
                starts_stream(p + k, end) ? probe_tail(p + k, end) : tail_need::none;
            if (need == tail_need::none)
                continue;
            if (need == tail_need::head) {
                auto st = binary("base64", p + k, end, useful);
                if (st != variant_status::ok)
                    return st;
                continue;
            }
        }
        if (!decode::base64(data.substr(p + k, end - p - k), decoded))
            continue;
        // Only a decode of every character to the run's end is a whole the next tails
        // are tails of.
        if (cnt.total == npos)
            cnt.total = at + b64_chars(d, p + k, end);
        if (!own) {
            m.valid = at <= cnt.total && decoded.size() == (cnt.total - at) * 6 / 8;
            if (m.valid)
                m = {true, at, decoded.size(), text_count(decoded)};
        }
        auto st = binary("base64", p + k, end, useful);
        if (st != variant_status::ok)
            return st;
    }
    return variant_status::ok;
}

// Hex glued to words ("key" + hex, "x" + hex + "g"): the run's longest
// stretch of hex digits on its own (a shorter run cannot hold one of
// min_hex_run digits that is not the whole run).
variant_status variant_scanner::walk::glued_hex(const alpha_run& r, bool& useful) {
    const std::size_t i = r.i, j = r.j;
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
    if (lb - la >= min_hex_run && !(la == i && lb == j))
        return hex_span(la, lb, useful);
    return variant_status::ok;
}

// A long run whose start decodes to binary (base64 of `tar c .env`, of a key store, of an
// image with a key appended): decoded at each of the four alignments and scanned at the
// next depth (the rules on its bytes, base64 or hex inside it, compressed streams after
// other bytes), the one binary_alignment prefers first. Binary has no text to tell the
// alignment by, and neither the run's start nor its padding fixes it: a word glued before
// the base64 ("x" + base64, which the receiver strips; "=" appended to forge padding), or
// a window of a streamed body that starts inside the run, shifts every quantum, and one
// alignment only would turn the bytes after the shift into noise.
variant_status variant_scanner::walk::binary_run(const alpha_run& r) {
    const std::size_t i = r.i, end = r.end;
    const std::size_t first = binary_alignment(data.substr(i, end - i));
    const auto [o, l, at_end] = where(i, end);
    for (std::size_t t = 0; t < 4; ++t) {
        if (!count())
            return variant_status::over_budget;
        const std::size_t at = i + (first + t) % 4;
        if (at + min_run > end || (at == text_b && end == text_e) ||
            !decode::base64(data.substr(at, end - at), decoded))
            continue;
        if (!vs.charge(decoded.size()))
            return variant_status::over_budget;
        std::string mine = std::move(decoded);
        auto st = vs.try_decoded(mine, "base64", chain, depth, o, l, at_end, at, end - at, c);
        if (st != variant_status::ok)
            return st;
    }
    return variant_status::ok;
}

} // namespace sluice::dlp
