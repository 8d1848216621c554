// Internal to dlp/: what the variant pipeline's two files share (variants.hpp): the
// scanner's per-call state (one depth's batch of decoded candidates, the findings sink)
// and two small byte predicates. variants.cpp holds the pipeline (candidate finding,
// decoding, depth loop); variant_views.cpp the per-location entry points (scan, scan_url,
// scan_body with its extraction of URL, JSON, form, multipart and SSE values, joined
// views, seams, leftovers). Not thread safe: one scanner per thread, as variants.hpp.
#pragma once

#include "sluice/dlp/variants.hpp"

#include "spaces.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::dlp {

namespace variant_detail {

inline constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
/// The Content-Type of a git push body (gitprotocol-http, "Smart Service git-receive-pack").
inline constexpr std::string_view receive_pack_type = "application/x-git-receive-pack-request";
/// How far short of the end of the bytes it was decoded from a candidate's range still
/// counts as running into it (segment::tail): a stray hex digit, a partial base64
/// quantum, a closing quote; the 16 bytes note_cut allows at the body's end.
inline constexpr std::size_t tail_slack = 16;

/// A chain with a step that rewrites bytes it does not understand (a Unicode fold drops
/// invalid UTF-8, a wide-text view converts every unit): a stream that seems to start in
/// such a copy of binary bytes was never sent, and it "decodes" to the end of a copy that
/// ends a few bytes after a header that passes the check.
inline bool lossy(std::string_view chain) noexcept {
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

/// Where a decoded buffer's bytes lie in the body at the earliest, for cut_stream::at (the
/// first byte a later window's scan must hold to decode a cut stream again): byte x of the
/// buffer was decoded from body bytes at `floor + x / den * num` or later. Straight from
/// base64 4 characters give 3 bytes (4/3), from hex 2 give 1 (2/1), escape and percent
/// decoding take 1 or more for each byte ("\u00e9" 6 for 2, "%41" 3 for 1); line breaks
/// and separators only add. Rates multiply along a chain. Any other step (an inflated
/// stream, Unicode normalisation, which can expand) has rate 0: its bytes may come from
/// anywhere after `floor`.
struct raw_bound {
    std::size_t floor = 0;
    std::size_t num = 0, den = 1;
    std::size_t at(std::size_t x) const noexcept {
        return num == 0 ? floor : floor + x / den * num;
    }
    /// The bound of the bytes a `step` decodes from this buffer's bytes starting at `b`.
    raw_bound decoded(std::size_t b, std::string_view step) const noexcept {
        std::size_t n = 0, d = 1;
        if (step == "base64")
            n = 4, d = 3;
        else if (step == "hex")
            n = 2;
        else if (step == "escape" || step == "pct")
            n = 1;
        const bool keep = num != 0 && n != 0 && den <= (npos >> 2) / d && num <= (npos >> 2) / n;
        return keep ? raw_bound{at(b), num * n, den * d} : raw_bound{at(b), 0, 1};
    }
};

using spaces::is_space;

} // namespace variant_detail

// Decoded candidates of one depth are batched into one buffer, separated by "\n \n" (which
// no candidate run crosses), and scanned with one scanner call: per-call overhead would
// otherwise dominate on text with many small candidates.
struct variant_scanner::segment {
    std::size_t begin = 0; ///< range in the level buffer
    std::size_t end = 0;
    std::string chain;
    std::size_t outer_off = 0;
    std::size_t outer_len = 0;
    /// Its bytes run into the end of the bytes they were decoded from, and those into the
    /// body's end (within tail_slack): only a stream cut short there was cut by the body's
    /// end, which in body_stream is a window's end (cut_stream).
    bool tail = false;
    variant_detail::raw_bound bound; ///< where its bytes lie in the body at the earliest
    std::size_t counted = 0;         ///< layers above it that count against max_depth
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
    /// rule '\0' fingerprint -> its finding's index in *out (variants.cpp: a finding
    /// seen again inside an archive's member takes the member's location).
    std::unordered_map<std::string, std::size_t> seen;
    std::string tmp;
    /// The buffer candidates() is looking at runs into the body's end (segment::tail).
    bool tail = true;
    variant_detail::raw_bound bound; ///< of that buffer (segment::bound)
    std::size_t counted = 0;         ///< of that buffer (segment::counted)
};

} // namespace sluice::dlp
