// Inspection of a body that is relayed as it arrives instead of being held whole
// (`dlp.large_bodies: stream`, and later WebSocket messages): one window/tail mechanism.
//
// The body is fed in pieces of any size. Every byte is scanned with the inspector's rules
// and decoders before the caller may forward it, with `overlap` bytes of the previous
// piece scanned again in front of the next, so a secret that straddles two pieces is
// found before any of it is released. A compressed stream is decoded across pieces with
// one decoder state (decode::stream_decoder): the declared Content-Encoding from the
// first byte, and any gzip member, zstd frame, bzip2 stream, zlib stream (RFC 1950), .xz
// stream or .lzma (LZMA_Alone) stream that starts anywhere in the raw bytes (a compressed
// file sent without Content-Encoding, or after other bytes), found as
// decode::embedded_offsets() finds them for a whole body; a start cut by the end of a
// piece is decided when the next piece is there. A false start fails within bytes and the
// search goes on after its first byte. The decoded bytes are a body of their own, given to
// an inner body_stream with the same window/tail discipline, so a stream inside a decoded
// stream (gzip of a zlib stream) is decoded across windows too, three levels down. A raw
// byte is released only when the decoded bytes it produced have `overlap` bytes of
// decoded context scanned after them (and, for a stream inside them, the same holds one
// level in).
//
// Any other compressed stream a window's scan opens and finds cut short by the end of the
// window (inspector::cut_streams(): a stream inside base64 or hex, raw DEFLATE, a stream
// nested deeper than three levels) would go on in bytes no scan decodes. Its start (or a
// point before it) is where the next scan begins: the carried `overlap` when it lies in
// it, else the bytes from there are carried whole (at most `window` of them; a false start
// in random bytes can decode for kilobytes before it breaks off), so the next scan decodes
// the stream from its start with the bytes after it. A stream cut again that starts where
// its scan began is longer than a window: before the last piece the body is refused, 413
// `decode_budget`.
//
// Thread safety: one body_stream per body, on the thread that owns the scanner. Never
// throws: an exception inside (allocation) becomes a deny 500 `internal` verdict.
#pragma once

#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/inspector.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/dlp/variants.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::dlp {

namespace decode {
class stream_decoder;
}

class body_stream {
public:
    /// True when a body with this Content-Encoding (all fields joined with ", ") can be
    /// inspected as a stream: none, `identity`, or one of gzip, x-gzip, deflate, br, zstd.
    /// Stacked or unknown codings cannot (the caller refuses them, 413 or 400).
    static bool can_stream(std::string_view content_encoding) noexcept;

    /// `p` and `s` must outlive the stream. `window` is the largest piece the caller feeds
    /// (bytes); `overlap` (bytes, < window) the context carried between pieces; it must be
    /// at least the longest secret a rule matches (8 KiB in the proxy).
    body_stream(const policy& p, detectors::scanner& s, variant_options o,
                std::string_view content_encoding, std::size_t window, std::size_t overlap);
    ~body_stream();
    body_stream(const body_stream&) = delete;
    body_stream& operator=(const body_stream&) = delete;

    struct result {
        /// forward, or the verdict that stops the body: 403 `dlp_finding` (supervise
        /// too), 400 `bad_encoding` (the declared coding is malformed or truncated), 413
        /// `decode_budget` (decoded bytes over the budget), 500 `internal`. Findings
        /// (this call's new ones; offsets are body offsets, or offsets in the decoded
        /// stream for a variant that starts with the coding name) are in `verdict.findings`.
        /// 413 `decode_budget` also for a compressed stream cut short by a window that no
        /// decoder here follows (see the top of this file).
        verdict v;
        /// Raw body bytes from the start of the body that may be forwarded now (never
        /// decreases; equals the bytes fed once `last` was fed without a deny).
        std::uint64_t releasable = 0;
    };

    /// Feeds the next raw bytes of the body as received (at most `window` at a time);
    /// `last` when no more follow.
    result feed(std::string_view data, bool last);

private:
    struct decoded_state;
    /// The decoded bytes of `outer`'s stream as a body (no declared coding), one level in.
    body_stream(const policy& p, detectors::scanner& s, variant_options o,
                std::string_view content_encoding, std::size_t window, std::size_t overlap,
                const body_stream* outer);
    bool scan(std::string_view bytes, std::uint64_t base, std::string_view coding, result& r);
    /// Where the next scan must begin for the streams the last scan, of [scan_at,
    /// scanned_end), found cut short (cuts_) and no decoder here follows: scanned_end -
    /// `overlap` or before (at most `window` before scanned_end), or npos when one started
    /// at scan_at (or earlier) and cannot be scanned again from its start.
    std::uint64_t rescan_from(std::uint64_t scan_at, std::uint64_t scanned_end) const noexcept;
    bool run_decoder(std::string_view raw, std::uint64_t raw_at, bool last, result& r);
    bool scan_decoded(std::string_view fresh, bool last, result& r);
    std::uint64_t decoded_release() const noexcept;

    const policy& policy_;
    detectors::scanner& scanner_;
    variant_options opts_;
    std::size_t window_;
    std::size_t overlap_;
    const body_stream* root_; ///< the body as received (its size sets the decode budget)
    unsigned depth_;          ///< streams this body is inside (0 for the body as received)
    std::string declared_;    ///< the declared coding ("" for identity)
    std::string raw_tail_;    ///< last max(`overlap`, decode::embedded_probe) raw bytes, scanned,
                              ///< in front of the next piece (more: rescan_from)
    bool rescan_ = false;     ///< the next scan begins at `rescan_at_`, in raw_tail_
    std::uint64_t rescan_at_ = 0; ///< raw offset
    std::uint64_t fed_ = 0;
    std::uint64_t released_ = 0;
    std::uint64_t sniff_from_ = 0; ///< raw offset where the magic search goes on
    std::unique_ptr<decoded_state> dec_;
    std::vector<finding_record> seen_; ///< findings reported so far (tails are rescanned)
    /// The streams the last scan found cut short, `at` made a raw offset of this body.
    std::vector<cut_stream> cuts_;
};

} // namespace sluice::dlp
