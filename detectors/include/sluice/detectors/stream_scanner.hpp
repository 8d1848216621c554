// Scans a byte stream delivered in pieces (chunked bodies, WebSocket frames). A secret
// split across any two feed() calls is found: the stream keeps a tail of the ruleset's
// max_width bytes and rescans it in Hyperscan block mode together with the next piece,
// reporting only findings that end in the new piece (so nothing is reported twice). A
// match that ends exactly at the end of the bytes fed so far is held back until the next
// feed() or finish(), because the next piece may extend it (a longer token, or a word
// character that breaks a trailing \b): call finish() when the stream ends. A match that
// keeps growing after it was reported (a rule with no closing delimiter) is not reported
// again, so its range may be shorter than a whole-buffer scan would give.
// Not thread safe: one stream_scanner per stream, used by one thread at a time.
#pragma once

#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/scanner.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::detectors {

class stream_scanner {
public:
    /// `s` must outlive this object; it may be shared by several streams of one thread.
    explicit stream_scanner(scanner& s);

    /// Scans `piece`; appends new findings to `out` with offsets relative to the start of
    /// the stream (bytes fed since construction or reset()). Returns false only on a
    /// Hyperscan internal error (fail closed).
    bool feed(std::string_view piece, std::vector<finding>& out);
    /// Reports matches held back at the end of the stream. Call once after the last feed().
    bool finish(std::vector<finding>& out);
    /// Forgets the carried tail and restarts offsets at 0.
    void reset() noexcept;
    /// Total bytes fed since construction or reset().
    std::size_t offset() const noexcept { return consumed_; }

private:
    bool scan_window(std::size_t from, std::size_t to, std::vector<finding>& out);

    scanner* scanner_;
    std::string window_; ///< reused buffer: carried tail followed by the current piece
    std::size_t tail_len_ = 0;
    std::size_t consumed_ = 0;
    std::vector<finding> scratch_;
    struct recent {
        std::string rule_id;
        std::size_t begin;
        std::size_t end;
    };
    std::vector<recent> recent_; ///< findings still overlapping the window, for dedupe
};

} // namespace sluice::detectors
