// Internal to dlp/: one call of variant_scanner::candidates() (variants.hpp), the candidate
// pass over one buffer of the variant pipeline. variant_candidates.cpp walks the buffer
// (the SIMD event loop, escape regions, non-ASCII text, spaced groups, whole-buffer views);
// variant_runs.cpp decodes the runs it finds (base64 at its alignments, hex, base32, the
// pieces of a split run, flipped tokens) and hands them to the next depth. Both include
// candidate_classes.hpp and candidate_runs.hpp for the byte classes and run shapes. Not
// thread safe: one walk per call, on the scanner's thread (variants.hpp).
#pragma once

#include "sluice/dlp/variants.hpp"

#include "variant_detail.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::dlp {

// One candidates() call: the buffer, where it maps in the body, and what its steps share
// (the decode scratch, the flipped runs scanned together at the end, how far the event
// loop and the non-ASCII scan have got).
struct variant_scanner::walk {
    walk(variant_scanner& s, std::string_view buf, std::string& ch, std::size_t dep,
         std::size_t off, std::size_t len, ctx& cx)
        : vs(s)
        , data(buf)
        , chain(ch)
        , depth(dep)
        , outer_off(off)
        , outer_len(len)
        , c(cx)
        , d(reinterpret_cast<const unsigned char*>(buf.data()))
        , n(buf.size()) {}

    variant_status run();

    // Where a candidate's own range maps in the outermost buffer, and whether its bytes
    // run into the body's end (segment::tail; a few bytes short of it for a stray digit,
    // a partial base64 quantum or a closing quote).
    struct span {
        std::size_t off, len;
        bool tail;
    };
    // A run of the base64 alphabets from i to j (end after its '=' padding), continued
    // across line breaks: where its first line and its last break are when wrapped.
    struct alpha_run {
        std::size_t i = 0, j = 0, end = 0;
        std::size_t first_line_end = variant_detail::npos, last_break = variant_detail::npos;
        bool wrapped = false, has_sep = false, all_hex = false;
    };

    span where(std::size_t b, std::size_t e) const noexcept;
    bool count() noexcept;
    variant_status binary(std::string_view step, std::size_t b, std::size_t e, bool& useful);
    variant_status hex_span(std::size_t a, std::size_t b, bool& useful);
    variant_status base64_aligned(std::size_t b, std::size_t limit, std::size_t e,
                                  std::size_t& start, bool& useful);
    void add_flip(std::string_view bytes, std::string_view step, std::size_t o, std::size_t l);
    variant_status run_transforms(std::size_t b, std::size_t j, std::size_t e, bool all_hex,
                                  bool wrapped);
    variant_status visit(std::size_t i, std::size_t& next_i);
    variant_status visit_from(std::size_t i);
    std::size_t delimited_hex_end(std::size_t i) const noexcept;
    alpha_run wrapped_run(std::size_t i, std::size_t first_end, bool first_sep,
                          bool first_all_hex) const noexcept;
    variant_status visit_run(std::size_t i, std::size_t& next_i);
    variant_status base64_run(const alpha_run& r);
    variant_status base64_prefix(std::size_t start, std::size_t stop);
    // The last decode to a split run's end, per alignment (its first character's index
    // among the run's base64 characters, mod 4): where it started, its size and its text
    // (pieces(), piece_to_end()).
    struct suffix_memo {
        bool valid = false;
        std::size_t chars_at = 0, size = 0, text = 0;
    };
    variant_status pieces(const alpha_run& r);
    enum class tail_need { none, head, whole };
    tail_need probe_tail(std::size_t b, std::size_t e);
    bool starts_stream(std::size_t b, std::size_t e) const;
    // Base64 characters counted in a split run (b64_chars) up to `pos`, and in all of
    // it once known: counted only for a piece that gets that far, so runs whose pieces
    // all fail the 16-character test (paths, URLs) cost nothing more.
    struct b64_count {
        std::size_t pos = 0, chars = 0, total = variant_detail::npos;
    };
    std::size_t chars_before(b64_count& cnt, std::size_t p) const noexcept;
    variant_status piece_to_end(std::size_t p, std::size_t q, std::size_t end, b64_count& cnt,
                                std::array<suffix_memo, 4>& memo, bool& useful);
    variant_status glued_hex(const alpha_run& r, bool& useful);
    variant_status binary_run(const alpha_run& r);
    variant_status visit_trigger(std::size_t i, std::size_t& next_i);
    void na_scan(std::size_t k, std::size_t to);
    variant_status events();
    variant_status spaced();
    variant_status spaced_binary(std::string_view joined, std::size_t b, std::size_t e);
    bool wrapped_lines(std::size_t b, std::size_t e) const noexcept;
    // Groups split by any other bytes (variant_scattered.cpp).
    variant_status scattered();
    struct join_counts {
        std::size_t chars = 0, pieces = 0, upper = 0, lower = 0, digits = 0, hex = 0,
                    lower_words = 0, upper_words = 0, turns = 0, text = 0;
        bool has_url = false, has_std = false;
        bool worth(std::size_t region) const noexcept;
    };
    // `escapes`: the letter of an escape ("\\n") is left out of the join.
    join_counts scattered_join(std::size_t b, std::size_t e, bool url, std::string* out,
                               bool escapes = true) const;
    variant_status scattered_decode(std::string_view joined, std::size_t b, std::size_t e);
    variant_status scattered_hex(std::string_view joined, std::size_t b, std::size_t e);
    variant_status finish();

    variant_scanner& vs;
    /// The last base64 or hex decode binary() passed on as text ([text_b, text_e)).
    std::size_t text_b = variant_detail::npos, text_e = variant_detail::npos;
    std::string_view data;
    std::string& chain;
    const std::size_t depth;
    const std::size_t outer_off;
    const std::size_t outer_len;
    ctx& c;
    const unsigned char* const d;
    const std::size_t n;
    std::string decoded;
    std::string inflated;
    level flips; // reversed, ROT13 and unprefixed runs, scanned in one call at the end
    std::size_t last_region_end = 0;
    std::size_t done = 0; // bytes before this have been decided (events)
    // Non-ASCII text: each whitespace-delimited token holding a byte >= 0x80, nearby ones
    // merged, folded after the candidate loop (escape regions it visits may span such
    // text). The loop reports chunks holding such bytes as hits (mask_cache::high_on), and
    // na_scan looks at those chunks and at the bytes a visit skipped (never classified):
    // one read of the input instead of a second pass over all of it.
    std::vector<std::pair<std::size_t, std::size_t>> na_regions;
    std::size_t na_begin = variant_detail::npos;
    std::size_t na_end = 0;
    std::size_t na_pos = 0; // bytes before this have been looked at
};

} // namespace sluice::dlp
