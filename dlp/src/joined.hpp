// Joined views (issue 21): the field values of one request or message, in document order,
// joined so that a secret cut over several fields is scanned whole. A query
// `?a=<part1>&junk=zz&b=<part2>&c=<part3>`, an AWS key id split over two JSON fields of a
// tool call, two SSE events: each part alone matches no detector, the joined line does.
//
// Model. A view is a list of values (query values, path segments, JSON string and number
// values, form values, multipart part bodies, SSE event data). Each value has a head (its
// first word) and a tail (its last word), each at most `edge` bytes; a short value without
// whitespace is "whole" (head == tail == the value). A secret cut over values ends one value
// (a tail), fills zero or more whole values, and starts the next (a head). The lines built
// (lines()) are:
//   - direct: the values joined without separators, broken after any value that is not
//     whole (tail(v) starts the next run): every split into consecutive values;
//   - window: for views of at most `small_view` values, tail(v_i) + head(v_j) and
//     tail(v_i) + whole(v_j) + head(v_k) for every i < j < k <= i + window - 1: a split
//     into two or three parts with other values (junk) between them, each line starting
//     at its first part (a rule that wants a boundary before the secret still matches);
//   - for larger views, the same with k <= i + 2: two or three parts with at most one
//     value between.
// Lines end with '\n'. Marks map each byte of the lines back to the 0-based ordinal of the
// value it came from, so a finding can name the values it spans (name_span: "2+5", 1-based).
//
// Bounds: lines() writes at most (for n values, w = window)
//   direct: n * (2 * edge + 1); window: n * ((w-1) + (w-1)(w-2)/2) * (3 * edge + 1).
// With the defaults (edge 128, window 8, small_view 64) a small view's lines are at most
// 64 * 28 * 385 = 674 KiB, whatever its size, and a large view's at most 1.4 KiB per value
// (4 lines of 2-3 words); callers charge the bytes to the decode budget. Limits (documented in
// dlp/README.md): four or more parts with junk between them, parts more than `window` values apart,
// and words longer than `edge` bytes on either side of the cut are not joined.
//
// Thread safety: a view is a value type used by one thread.
#pragma once

#include "sluice/dlp/seam.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dlp::joined {

inline constexpr std::size_t edge = 128;      ///< bytes of a head or tail word
inline constexpr std::size_t window = 8;      ///< values one window line may span
inline constexpr std::size_t small_view = 64; ///< views up to this size get window lines

/// Where a run of line bytes came from: bytes [at, next mark's at) are from value `ordinal`
/// (0-based); ordinal npos marks a line break.
struct mark {
    std::size_t at = 0;
    std::uint32_t ordinal = 0;
};
inline constexpr std::uint32_t no_value = 0xffffffffu;

class view {
public:
    /// `name` is the extraction ("query", "path", "json", "form", "multipart", "sse").
    explicit view(std::string name)
        : name_(std::move(name)) {}

    /// Adds the next value in document order. Empty values and values of only whitespace
    /// still count as an ordinal (so names match the request) but join nothing.
    void add(std::string_view value);

    const std::string& name() const noexcept { return name_; }
    std::size_t size() const noexcept { return values_.size(); }
    /// Value i's first word and last word (at most `edge` bytes each; empty when the value
    /// has no word).
    std::string_view head(std::size_t i) const noexcept {
        return {text_.data() + values_[i].head_at, values_[i].head_len};
    }
    std::string_view tail(std::size_t i) const noexcept {
        return {text_.data() + values_[i].tail_at, values_[i].tail_len};
    }

    /// Appends the lines described above to `out` and their marks to `*marks` (offsets into
    /// `out`; null: no marks, the fast path, called again with marks only when a finding
    /// needs naming); the window lines start at `window_at` (the direct lines come first).
    /// With `split` > 0 only lines holding a value before ordinal `split` and one at or
    /// after it are written (a seam: each side's own lines were scanned with it). Returns
    /// false (and writes nothing) when there is nothing to join (fewer than two values with
    /// a word). The buffer grows once, by the lines' exact size.
    bool lines(std::string& out, std::vector<mark>* marks, std::size_t& window_at,
               std::size_t split = 0) const;
    bool lines(std::string& out, std::vector<mark>& marks, std::size_t& window_at) const {
        return lines(out, &marks, window_at);
    }

private:
    template <class Writer>
    std::size_t emit(Writer& w, std::size_t split) const;

    struct value {
        std::size_t head_at = 0, head_len = 0; ///< into text_
        std::size_t tail_at = 0, tail_len = 0;
        bool whole = false; ///< no whitespace and at most `edge` bytes: head == tail == value
        bool any = false;   ///< has a word
    };
    std::string name_;
    std::string text_; ///< heads and tails, back to back
    std::vector<value> values_;
};

/// The distinct 1-based ordinals of the values that bytes [off, off + len) of a lines()
/// buffer came from, joined by '+' in ascending order ("2+5"); empty when the range covers
/// fewer than two values. `marks` as lines() wrote them, for the same buffer.
std::string name_span(const std::vector<mark>& marks, std::size_t off, std::size_t len);
/// The same ordinals, 0-based, ascending, whatever their number.
std::vector<std::uint32_t> span(const std::vector<mark>& marks, std::size_t off, std::size_t len);

} // namespace sluice::dlp::joined

namespace sluice::dlp::joined {

/// The segments of a path ('/' separated, percent-decoded), in order.
void add_path(view& v, std::string_view path);
/// The values of a query or an application/x-www-form-urlencoded body ('&' separated,
/// form-decoded: '+' is a space; WHATWG URL Standard, "application/x-www-form-urlencoded
/// parsing"). Names are not values.
void add_form(view& v, std::string_view query);
/// The string values and integers of a JSON text (RFC 8259), in document order, nested
/// objects and arrays included (to a nesting of 64); object keys are not values. Parsed by
/// simdjson; a text simdjson rejects is read by Boost.JSON's SAX parser up to the error, so
/// a body cut short or broken on purpose still gives the values before the break. Returns
/// false when not one value could be read. With `strings`, every object key and string
/// value, unescaped, is also appended to it, each followed by '\n'.
bool add_json(view& v, std::string_view text, std::string* strings = nullptr);
/// The ends of a message whose values are `v` (seam.hpp): the first words of its first
/// `seam_values` values with a word, the last words of its last ones.
message_ends ends_from(const view& v);
/// The ends of a text that is not structured: its first and last bare words (seam.hpp).
message_ends ends_of_words(std::string_view text);
/// The data of each event of a text/event-stream body (WHATWG HTML, "Server-sent events":
/// events end at a blank line), its `data:` lines concatenated without the '\n' the
/// standard puts between them, so a token cut over two data lines is whole.
std::vector<std::string> sse_events(std::string_view body);
/// sse_events, one value per event.
void add_sse(view& v, std::string_view body);

} // namespace sluice::dlp::joined
