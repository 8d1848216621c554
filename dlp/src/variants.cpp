// The variant pipeline. The raw pass is one scanner call, exactly as without variants;
// everything else is driven by one cheap pass over the bytes with a 256-entry class
// table that finds candidate runs (base64/hex alphabet runs of 16+ bytes, and the
// regions around '%', '\\' and '&' escapes, and non-ASCII text). Only those runs are
// decoded, and binary-looking base64/hex output is dropped unless it is a gzip/zlib
// stream, so the cost on ordinary text stays a fraction of the raw scan.
#include "sluice/dlp/variants.hpp"

#include "sluice/detectors/literal_set.hpp"
#include "sluice/detectors/text.hpp"
#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/decode.hpp"
#include "sluice/dlp/seam.hpp"

#include "candidate_runs.hpp" // the classification and its runs (an anonymous namespace)
#include "joined.hpp"
#include "variant_detail.hpp"

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
    std::shared_ptr<const detectors::literal_set> set; ///< null when no value is configured
    std::vector<std::size_t> lengths;
    std::vector<std::string> fingerprints;
};

protected_values::protected_values(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}
protected_values::~protected_values() = default;

std::expected<std::shared_ptr<const protected_values>, std::string>
protected_values::compile(const std::vector<std::string>& values) {
    auto p = std::make_unique<impl>();
    std::vector<std::string> literals;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const auto& v = values[i];
        if (v.empty())
            continue;
        if (v.size() < 4)
            return std::unexpected("protected value #" + std::to_string(i + 1) +
                                   " is shorter than 4 bytes");
        literals.push_back(v);
        p->lengths.push_back(v.size());
        p->fingerprints.push_back(detectors::fingerprint(v));
    }
    if (!literals.empty()) {
        // The literal set's message names no value.
        auto set = detectors::literal_set::compile(literals, {.first_only = true});
        if (!set)
            return std::unexpected("protected values: " + set.error());
        p->set = std::move(*set);
    }
    return std::shared_ptr<const protected_values>(new protected_values(std::move(p)));
}

// ---------------------------------------------------------------------------------------
// scanner

variant_scanner::variant_scanner(detectors::scanner& s, variant_options o)
    : scanner_(s)
    , opts_(std::move(o)) {}

variant_scanner::~variant_scanner() = default;

void variant_scanner::reset() noexcept {
    ends_ = {};
    stats_ = {};
    cuts_.clear();
}

namespace {

// A chain with a step that rewrites bytes it does not understand (a Unicode fold drops
// invalid UTF-8, a wide-text view converts every unit): a stream that seems to start in
// such a copy of binary bytes was never sent, and it "decodes" to the end of a copy that
// ends a few bytes after a header that passes the check.
bool lossy(std::string_view chain) noexcept {
    for (std::size_t p = 0; p <= chain.size();) {
        const std::size_t q = std::min(chain.find('>', p), chain.size());
        const std::string_view step = chain.substr(p, q - p);
        if (step == "unicode" || step.starts_with("utf") || step == "reverse" || step == "rot13" ||
            step == "spaced" || step == "html" || step == "unprefixed")
            return true;
        p = q + 1;
    }
    return false;
}

// Where in the body's bytes [o, o + l) a stream that starts at `off` of the `n` bytes
// decoded from them at the latest starts (cut_stream::at): the first of the bytes a scan
// of a later window needs to find it again. Hex decodes 2 (or 3, delimited) characters to
// a byte, and a run is decoded at both alignments wherever a window starts in it; escape
// and percent decoding only shrink and start anywhere. So a stream reached through hex
// and those alone starts at o + 2 * off or later (o + off * l / n straight from hex).
// Any other step (base64, whose alignment a window starting mid-run loses; a stream
// inside an inflated stream) is found again only from the start of the run.
std::size_t cut_origin(std::string_view chain, std::size_t depth, std::size_t o, std::size_t l,
                       std::size_t off, std::size_t n) noexcept {
    if (n == 0 || off >= n || !chain.starts_with("hex"))
        return o;
    if (depth == 1 && chain == "hex")
        return o + off * (l / n);
    for (std::size_t p = 4; p < chain.size();) {
        const std::size_t q = std::min(chain.find('>', p), chain.size());
        const std::string_view step = chain.substr(p, q - p);
        if (step != "escape" && step != "pct")
            return o;
        p = q + 1;
    }
    return chain.size() == 3 || chain[3] == '>' ? o + std::min(2 * off, l) : o;
}

} // namespace

void variant_scanner::note_cut(std::size_t at, std::size_t end) {
    if (cut_end_ != 0 && end + tail_slack >= cut_end_)
        cuts_.push_back({at, {}});
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
    if (opts_.protect && opts_.protect->get().set) {
        const auto& pv = opts_.protect->get();
        const auto on_match = [&](unsigned id, std::size_t end) -> int {
            detectors::finding f;
            f.rule_id = "protected-value";
            f.category = "protected";
            f.end = end;
            f.begin = end - pv.lengths[id];
            f.confidence = 1.0;
            f.fingerprint = pv.fingerprints[id];
            scratch_.push_back(std::move(f));
            return 0;
        };
        if (!pv.set->scan(data, on_match))
            return variant_status::scanner_error;
    }
    for (auto& f : scratch_) {
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
        std::string key = f.rule_id;
        key += '\0';
        key += f.fingerprint;
        const auto [at, fresh] = c.seen.try_emplace(std::move(key), c.out->size());
        if (!fresh) {
            // Already reported through a shorter chain. The tar of a tar.gz is scanned as
            // text before its members are, and a pack's zlib streams are opened as embedded
            // streams before git reads them: the member's name or the blob's path says more
            // than "body". (A joined view drops and moves findings, so the index is checked.)
            const auto named = [](std::string_view l) {
                return l.starts_with("archive:") || l.starts_with("git:");
            };
            if (!named(c.location) || at->second >= c.out->size())
                continue;
            auto& first = (*c.out)[at->second];
            if (!named(first.location) && first.f.rule_id == f.rule_id &&
                first.f.fingerprint == f.fingerprint) {
                v.f = std::move(f);
                first = std::move(v);
            }
            continue;
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
    const bool top_tail = c.tail;
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
            c.tail = sg.tail && top_tail;
            st = candidates(std::string_view(cur.buf).substr(sg.begin, sg.end - sg.begin),
                            seg_chain, depth, sg.outer_off, sg.outer_len, c);
            if (st != variant_status::ok)
                break;
        }
    }
    c.tail = top_tail;
    c.next.clear();
    return st;
}

variant_status variant_scanner::try_decoded(std::string_view decoded, std::string_view step,
                                            std::string& chain, std::size_t depth, std::size_t off,
                                            std::size_t len, bool tail, ctx& c) {
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
    sg.tail = tail;
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
        bool cut = false;
        for (;;) {
            const auto rc =
                decode::sniffed(data.substr(off), decode_room(), inflated, name, nullptr, &cut);
            if (rc == decode::inflate_status::over_limit)
                return variant_status::over_budget;
            // Only a stream running into the end of bytes that run into the body's end was
            // cut by it (a window's end in body_stream); one that breaks off inside them
            // would break off in the whole body as well.
            if (cut && c.tail && outer_len != npos && !lossy(chain))
                note_cut(cut_origin(chain, depth, o, l, off, data.size()), o + l);
            if (rc == decode::inflate_status::unknown || inflated.empty())
                return variant_status::ok;
            if (name != "raw-deflate" || !chain.ends_with("raw-deflate") ||
                inflated.size() >= data.size() - off || !data.ends_with(inflated))
                break;
            // Raw DEFLATE that decodes to its own tail, inside raw DEFLATE ("\x12\x12..." is
            // the same bytes less one, and so on down): nothing new to scan, and each copy
            // opened at the next depth would nest until max_depth refuses a clean body. The
            // copy is opened where it starts in these bytes instead, at this depth. (A
            // stored block's bytes are its input's tail too: the first one is still opened
            // and named, as a zstd raw block is.)
            off = data.size() - inflated.size();
            if (++stats_.candidates > opts_.budget.max_candidates)
                return variant_status::over_budget;
        }
        if (!charge(inflated.size()))
            return variant_status::over_budget;
        return try_decoded(inflated, name, chain, depth, o, l, cut && c.tail, c);
    };
    auto st = open(0);
    // Every stream start, each a candidate: a cap that skipped the rest would let decoy
    // magics hide the stream after them.
    for (const std::size_t off : decode::embedded_offsets(data)) {
        if (st != variant_status::ok)
            break;
        if (off > 0)
            st = ++stats_.candidates <= opts_.budget.max_candidates ? open(off)
                                                                    : variant_status::over_budget;
    }
    if (st == variant_status::ok) // zip, tar, ... (variant_archive.cpp)
        st = scan_archives(data, chain, depth, o, outer_len == npos ? npos : l, c);
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
    // Where a candidate's own range maps in the outermost buffer, and whether its bytes
    // run into the body's end (segment::tail; a few bytes short of it for a stray digit,
    // a partial base64 quantum or a closing quote).
    struct span {
        std::size_t off, len;
        bool tail;
    };
    const auto where = [&](std::size_t b, std::size_t e) {
        const bool tail = c.tail && e + tail_slack >= n;
        return outer_len == npos ? span{b, e - b, tail} : span{outer_off, outer_len, tail};
    };
    const auto count = [&]() { return ++stats_.candidates <= opts_.budget.max_candidates; };
    // Binary decoders (base64, hex): open compressed streams, drop binary noise.
    const auto binary = [&](std::string_view step, std::size_t b, std::size_t e,
                            bool& useful) -> variant_status {
        useful = false;
        if (!charge(decoded.size()))
            return variant_status::over_budget;
        const auto [o, l, at_end] = where(b, e);
        if (decode::looks_compressed(decoded)) {
            const bool zstd = static_cast<unsigned char>(decoded[0]) == 0x28;
            bool cut = false;
            const auto rc = decode::content(zstd ? "zstd" : "deflate", decoded, decode_room(),
                                            inflated, nullptr, &cut);
            const bool gz = rc == decode::inflate_status::error && !zstd && !cut;
            const auto rg =
                gz ? decode::content("gzip", decoded, decode_room(), inflated, nullptr, &cut) : rc;
            if (rg == decode::inflate_status::over_limit)
                return variant_status::over_budget;
            if (cut && at_end && !lossy(chain))
                note_cut(o, o + l);
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
                // Named as sniffed() names them: a zlib stream is "deflate".
                const char* coding = zstd ? "zstd" : gz ? "gzip" : "deflate";
                auto st = try_decoded(mine, coding, chain, depth + 1, o, l, cut && at_end, c);
                chain.resize(saved);
                return st;
            }
        }
        if (!decode::looks_compressed(decoded) && decode::starts_compressed(decoded)) {
            // bzip2, xz or lzma: opened at the next depth (open_compressed), which names
            // the coding, and scanned as they are if they do not decode.
            useful = true;
            std::string mine = std::move(decoded);
            return try_decoded(mine, step, chain, depth, o, l, at_end, c);
        }
        if (!mostly_printable(decoded)) {
            // Binary from hex (a key store, a blob with a key's base64 appended): the
            // next depth looks for encoded text inside it. Short runs (hashes) are noise.
            // Not `useful`: the other alignment of a misaligned run is still tried.
            if (step != "hex" || decoded.size() < min_binary_run)
                return variant_status::ok;
            std::string mine = std::move(decoded);
            return try_decoded(mine, step, chain, depth, o, l, at_end, c);
        }
        useful = true;
        std::string mine = std::move(decoded); // the recursion reuses `decoded`
        return try_decoded(mine, step, chain, depth, o, l, at_end, c);
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
                    const std::size_t at = i + binary_alignment(data.substr(i, end - i));
                    if (decode::base64(data.substr(at, end - at), decoded)) {
                        if (!charge(decoded.size()))
                            return variant_status::over_budget;
                        // Scanned at the next depth with its own candidates: base64 or
                        // hex of the key inside the binary is decoded again.
                        const auto [o, l, at_end] = where(i, end);
                        std::string mine = std::move(decoded);
                        auto st = try_decoded(mine, "base64", chain, depth, o, l, at_end, c);
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
            const auto [o, l, at_end] = where(b, e);
            std::string mine = std::move(decoded);
            auto st = try_decoded(mine, step, chain, depth, o, l, at_end, c);
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
        const auto [o, l, at_end] = where(v.begin, v.end);
        auto st = try_decoded(v.bytes, v.step, chain, depth, o, l, at_end, c);
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
            const auto [o, l, at_end] = where(b, e);
            std::string mine = std::move(decoded);
            auto st = try_decoded(mine, "unicode", chain, depth, o, l, at_end, c);
            if (st != variant_status::ok)
                return st;
        }
    }
    if (flips.segs.empty())
        return variant_status::ok;
    stats_.scanned_variants += flips.segs.size();
    return scan_buffer(flips.buf, chain, 0, 0, c, &flips.segs);
}

} // namespace sluice::dlp
