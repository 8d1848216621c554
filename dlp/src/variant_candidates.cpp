// The candidate pass of the variant pipeline (variants.hpp), walking one buffer: the SIMD
// event loop over 64-byte chunks (candidate_classes.hpp), the decision at each event (an
// alphabet run, delimited hex, a '%', '\\' or '&' escape region), non-ASCII text, runs
// split into equal groups by spaces, and the whole-buffer views; the runs it finds are
// decoded by variant_runs.cpp (variant_walk.hpp). variants.cpp holds the depth loop, the
// budget and the compressed streams. Not thread safe: one scanner per thread.
#include "sluice/dlp/variants.hpp"

#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/decode.hpp"

#include "candidate_runs.hpp" // the classification and its runs (an anonymous namespace)
#include "variant_detail.hpp"
#include "variant_walk.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace sluice::dlp {

variant_status variant_scanner::candidates(std::string_view data, std::string& chain,
                                           std::size_t depth, std::size_t outer_off,
                                           std::size_t outer_len, ctx& c) {
    if (depth > 0) {
        auto st = open_compressed(data, chain, depth, outer_off, outer_len, c);
        if (st != variant_status::ok)
            return st;
    }
    walk w(*this, data, chain, depth, outer_off, outer_len, c);
    return w.run();
}

variant_status variant_scanner::walk::run() {
    auto st = events();
    if (st == variant_status::ok)
        st = spaced();
    if (st == variant_status::ok)
        st = scattered();
    return st == variant_status::ok ? finish() : st;
}

variant_scanner::walk::span variant_scanner::walk::where(std::size_t b,
                                                         std::size_t e) const noexcept {
    const bool tail = c.tail && e + tail_slack >= n;
    return outer_len == npos ? span{b, e - b, tail} : span{outer_off, outer_len, tail};
}

bool variant_scanner::walk::count() noexcept {
    return ++vs.stats_.candidates <= vs.opts_.budget.max_candidates;
}

// One candidate decision at byte i (a run, a trigger or nothing); sets next_i.
variant_status variant_scanner::walk::visit(std::size_t i, std::size_t& next_i) {
    const unsigned char cl = cls[d[i]];
    if ((cl & (k_b64 | k_trigger)) == 0) {
        next_i = i + 1;
        return variant_status::ok;
    }
    return (cl & k_b64) ? visit_run(i, next_i) : visit_trigger(i, next_i);
}

variant_status variant_scanner::walk::visit_from(std::size_t i) {
    std::size_t next = i + 1;
    auto st = visit(i, next);
    done = std::max(done, std::max(next, i + 1));
    return st;
}

// Delimited hex "67:68:70" / "67-68" / "67 68" from i: where it ends, npos if none.
std::size_t variant_scanner::walk::delimited_hex_end(std::size_t i) const noexcept {
    if (!((vs.opts_.enabled & dec_hex) && i + 4 < n && is_hex(d[i]) && is_hex(d[i + 1]) &&
          (d[i + 2] == ':' || d[i + 2] == '-' || d[i + 2] == ' ') && is_hex(d[i + 3]) &&
          is_hex(d[i + 4]) && (i == 0 || !(cls[d[i - 1]] & k_b64))))
        return npos;
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
    return pairs >= min_hex_pairs && (k >= n || !is_hex(d[k])) ? k : npos;
}

// The run of the base64 alphabets from i (its first line `first`), continued across CRLF
// or LF line breaks when each line before a break holds 16+ alphabet bytes.
variant_scanner::walk::alpha_run
variant_scanner::walk::wrapped_run(std::size_t i, std::size_t first_end, bool first_sep,
                                   bool first_all_hex) const noexcept {
    alpha_run r;
    r.i = i;
    std::size_t& j = r.j;
    j = first_end;
    r.has_sep = first_sep;
    std::size_t line_start = i;
    for (;;) {
        if (const std::size_t k = line_break_end(d, j, n); k != j) {
            const std::size_t line = j - line_start;
            // Any width of 16 or more, and lines of different widths (PEM 64,
            // MIME 76, tools at 60, 70 or 72, wrapping by hand).
            if (line >= min_run && k < n && (cls[d[k]] & k_b64)) {
                if (r.first_line_end == npos)
                    r.first_line_end = j;
                r.last_break = j;
                r.wrapped = true;
                const alphabet_run line_run = scan_alphabet_run(d, k, n);
                j = line_run.end;
                r.has_sep = r.has_sep || line_run.has_sep;
                line_start = k;
                continue;
            }
        }
        break;
    }
    r.all_hex = !r.wrapped && first_all_hex;
    r.end = j;
    while (r.end < n && r.end - j < 2 && d[r.end] == '=')
        ++r.end;
    return r;
}

variant_status variant_scanner::walk::visit_run(std::size_t i, std::size_t& next_i) {
    if (const std::size_t k = delimited_hex_end(i); k != npos) {
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
    const alphabet_run first = scan_alphabet_run(d, i, n);
    if (first.end - i < min_run) {
        // The common case (a word): nothing to decode, and too short to be a wrapped
        // line. Kept to one table lookup per byte.
        next_i = first.end;
        return variant_status::ok;
    }
    const alpha_run r = wrapped_run(i, first.end, first.has_sep, first.all_hex);
    const std::size_t len = r.j - i;
    variant_status st = variant_status::ok;
    if (!(vs.opts_.enabled & (r.all_hex ? dec_hex : dec_base64))) {
        // family off (benchmarks)
    } else if (r.all_hex && len >= min_hex_run) {
        bool useful = false;
        st = hex_span(i, r.j, useful);
    } else if (!r.all_hex && len >= min_run) {
        st = base64_run(r);
    }
    if (st == variant_status::ok && (vs.opts_.enabled & dec_base64))
        st = run_transforms(i, r.j, r.end, r.all_hex, r.wrapped);
    next_i = r.end > i ? r.end : i + 1;
    return st;
}

// Triggers: '%', '\\', '&'.
variant_status variant_scanner::walk::visit_trigger(std::size_t i, std::size_t& next_i) {
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
        valid = i + 1 < n && std::string_view("uUx/01234567").find(static_cast<char>(d[i + 1])) !=
                                 std::string_view::npos;
    } else {
        if (i + 2 < n && (d[i + 1] == '#' || std::isalpha(d[i + 1]))) {
            const std::size_t semi = data.substr(0, std::min(n, i + 13)).find(';', i + 1);
            valid = semi != std::string_view::npos;
        }
    }
    const unsigned fam = t == '%' ? dec_pct : t == '\\' ? dec_escape : dec_html;
    if (!valid || !(vs.opts_.enabled & fam)) {
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
        if (!vs.charge(decoded.size()))
            return variant_status::over_budget;
        const auto [o, l, at_end] = where(b, e);
        std::string mine = std::move(decoded);
        auto st = vs.try_decoded(mine, step, chain, depth, o, l, at_end, b, e - b, c);
        if (st != variant_status::ok)
            return st;
    }
    next_i = e > i ? e : i + 1;
    return variant_status::ok;
}

// Non-ASCII bytes in [k, to), and the tokens they are in (which may reach past `to`).
void variant_scanner::walk::na_scan(std::size_t k, std::size_t to) {
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
}

// Candidate starts come from next_events(): 64-byte chunks classified with SIMD into
// bit masks, runs of 16+ base64 or hex-and-delimiter bytes and valid triggers (a '%'
// before a hex digit, a '\\' before u/x/octal/'/', a '&' before '#' or a letter) found
// on the masks, chunks without any skipped whole. Events are visited in byte order.
// A per-byte branch would mispredict every few bytes on ordinary text (word/space
// alternation, "\\n" in JSON) and cost more than the raw scan.
variant_status variant_scanner::walk::events() {
    const bool want_na = (vs.opts_.enabled & dec_unicode) != 0;
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
        std::uint64_t hex = (vs.opts_.enabled & dec_hex) ? h.ev.hex : 0;
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
    return variant_status::ok;
}

// Base64 or hex cut into equal groups by spaces or line breaks ("Z2hw X2Fi ...",
// a space every 12 characters): the groups joined and decoded as one run.
variant_status variant_scanner::walk::spaced() {
    if (!(vs.opts_.enabled & (dec_base64 | dec_hex)))
        return variant_status::ok;
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
            (vs.opts_.enabled & dec_hex)) {
            if (decode::hex(joined, decoded))
                st = binary("hex", b, e, useful);
        } else if ((vs.opts_.enabled & dec_base64) && decode::base64(joined, decoded)) {
            st = binary("base64", b, e, useful);
            // Binary, at each alignment (binary_run): groups of base64 of random bytes
            // with a token inside were dropped as noise. Lines of min_run or more with
            // nothing but line breaks between them are a wrapped run, which visit_run
            // decoded so already.
            if (st == variant_status::ok && !useful && joined.size() >= min_binary_run &&
                !wrapped_lines(b, e))
                st = spaced_binary(joined, b, e);
        }
    });
    return st;
}

bool variant_scanner::walk::wrapped_lines(std::size_t b, std::size_t e) const noexcept {
    const std::size_t first = static_cast<std::size_t>(
        std::find_if(d + b, d + e, [](unsigned char ch) { return ch == '\r' || ch == '\n'; }) - d);
    return first - b >= min_run &&
           std::none_of(d + b, d + e, [](unsigned char ch) { return ch == ' ' || ch == '\t'; });
}

variant_status variant_scanner::walk::spaced_binary(std::string_view joined, std::size_t b,
                                                    std::size_t e) {
    const auto [o, l, at_end] = where(b, e);
    for (std::size_t k = 0; k < 4; ++k) {
        if (!count())
            return variant_status::over_budget;
        if (!decode::base64(joined.substr(k), decoded))
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

// Non-ASCII regions folded, the whole-buffer views, and the flipped runs scanned.
variant_status variant_scanner::walk::finish() {
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
    decode::more_views(data, vs.decode_room(), views);
    for (auto& v : views) {
        if (!count() || !vs.charge(v.bytes.size()))
            return variant_status::over_budget;
        const auto [o, l, at_end] = where(v.begin, v.end);
        auto st = vs.try_decoded(v.bytes, v.step, chain, depth, o, l, at_end, v.begin,
                                 v.end - v.begin, c);
        if (st != variant_status::ok)
            return st;
    }
    for (const auto& [b, e] : na_regions) {
        if (e == b)
            continue;
        if (!count())
            return variant_status::over_budget;
        if (decode::fold_unicode(data.substr(b, e - b), decoded)) {
            if (!vs.charge(decoded.size()))
                return variant_status::over_budget;
            const auto [o, l, at_end] = where(b, e);
            std::string mine = std::move(decoded);
            auto st = vs.try_decoded(mine, "unicode", chain, depth, o, l, at_end, b, e - b, c);
            if (st != variant_status::ok)
                return st;
        }
    }
    if (flips.segs.empty())
        return variant_status::ok;
    vs.stats_.scanned_variants += flips.segs.size();
    return vs.scan_buffer(flips.buf, chain, 0, 0, c, &flips.segs);
}

} // namespace sluice::dlp
