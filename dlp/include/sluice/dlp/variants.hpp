// The variant pipeline: scans bytes as they are, then the decoded variants hiding inside
// them (base64, hex, percent, JSON/JS escapes, HTML entities, Unicode look-alikes,
// gzip/zlib blobs), chained up to a depth limit, plus Content-Encoding and extraction by
// Content-Type for bodies and the parts of a URL. Every finding names its location and
// the chain of decoders that revealed it. Work is bounded by a per-message budget; going
// over it is a result (`variant_status::over_budget`), never a silent skip.
//
// Thread safety: a variant_scanner is used by one thread (it drives a detectors::scanner,
// which is per thread). protected_values is immutable after compile and shared freely.
// Nothing here throws across the API except std::bad_alloc from the std containers used
// for output; callers (the inspector) treat an exception as fail-closed.
#pragma once

#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/seam.hpp"

#include <cstddef>
#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dlp {

namespace joined {
class view;
struct mark;
} // namespace joined

/// Exact operator-configured secrets (CONTRACT.md `protected_values`), compiled into one
/// detectors::literal_set (scanned with the thread's Hyperscan scratch). Findings have rule id
/// "protected-value", category "protected", confidence 1.
class protected_values {
public:
    /// Compiles the values (empty ones are skipped; values shorter than 4 bytes are
    /// rejected because they would match everywhere). Error text never contains a value.
    static std::expected<std::shared_ptr<const protected_values>, std::string>
    compile(const std::vector<std::string>& values);
    ~protected_values();
    protected_values(const protected_values&) = delete;
    protected_values& operator=(const protected_values&) = delete;

    struct impl;
    explicit protected_values(std::unique_ptr<impl> p);
    const impl& get() const noexcept { return *impl_; }

private:
    std::unique_ptr<impl> impl_;
};

/// Limits per message (one variant_scanner, or between reset() calls).
struct variant_budget {
    /// Decoders chained on one path (pct>pct>pct>base64>gzip>...). A buffer that still
    /// decodes after this many is over budget (413 decode_budget), not forwarded unscanned;
    /// the byte and candidate budgets bound the work long before a real chain gets here.
    /// A layer that decodes to nearly the bytes it came from (at most 1/16 fewer, or 4, and
    /// no more) does not count: garbage that decodes to a near copy of itself (raw DEFLATE
    /// of "\x12\x12...", "%252525..." under percent decoding) nests once per byte or escape.
    /// The byte budget bounds those, and 4,096 levels in all.
    std::size_t max_depth = 16;
    /// Absolute cap on bytes produced by all decoders together (Content-Encoding included).
    std::size_t max_decoded_bytes = 64u << 20;
    /// Relative cap: decoded bytes <= decoded_floor + decoded_ratio * input bytes.
    std::size_t decoded_ratio = 16;
    std::size_t decoded_floor = 1u << 20;
    /// Decoder invocations (candidate runs tried), all depths.
    std::size_t max_candidates = 1u << 20;
};

/// Decoder families for variant_options::enabled (benchmarks measure each one alone).
enum decoder_bits : unsigned {
    dec_base64 = 1u << 0,
    dec_hex = 1u << 1,
    dec_pct = 1u << 2,
    dec_escape = 1u << 3,
    dec_html = 1u << 4,
    dec_unicode = 1u << 5,
    /// Base64 and hex in groups split by other bytes (src/variant_scattered.cpp).
    dec_scattered = 1u << 6,
    dec_all = 0x7fu,
};

struct variant_options {
    bool decoders = true; ///< false: raw scan only (`sluice scan --no-variants`)
    /// Candidate decoders in use (decoder_bits); Content-Encoding and extraction by
    /// Content-Type are governed by `decoders` alone.
    unsigned enabled = dec_all;
    variant_budget budget;
    /// Joined views of the values of a URL or body (src/joined.hpp). Always on in the proxy
    /// and `sluice scan`; off only to measure their cost (bench/variants_bench.cpp).
    bool joined = true;
    std::shared_ptr<const protected_values> protect; ///< may be null
};

enum class variant_status {
    ok,
    over_budget,   ///< a budget was exceeded: deny 413 `decode_budget`
    bad_encoding,  ///< unknown or malformed Content-Encoding: deny 400 `bad_encoding`
    scanner_error, ///< Hyperscan internal error: deny 500 `internal`
};

struct variant_finding {
    detectors::finding f; ///< begin/end relative to the buffer the decoder chain produced
    std::string location; ///< as given to the scan call ("url", "header:x", "body")
    /// "raw", or the steps joined by '>': location-level steps first (content codings
    /// "gzip", extractions "json", "form", "multipart", "sse", "path", "query", "host";
    /// joined views "<extraction>:<ordinals>" ("query:1+3+4"; unnamed "joined:<extraction>"
    /// when the match lies in one value);
    /// compressed bodies without a Content-Encoding "gzip", "deflate", "zstd", "bzip2",
    /// "raw-deflate"), then decoders "base64", "hex", "pct", "escape", "html", "qp",
    /// "unicode", "gzip", and the text transforms of decode.hpp: "base32", "base32hex",
    /// "ascii85", "utf16le", "utf16be", "utf32le", "utf32be", "bytes" (byte lists),
    /// "spaced" (one separator between characters), "uu", "rot13", "reverse",
    /// "unprefixed" (a checksum-valid GitHub token body scanned with "ghp_" put back)
    /// ("gzip>json>base64"). Never contains input bytes.
    std::string variant;
    /// Byte range in the outermost buffer of the location (the raw data, or the
    /// content-decoded / extracted buffer for location-level steps) that holds the
    /// wrapped secret: for "raw" exactly the secret, for decoded variants the whole
    /// candidate run it was decoded from.
    std::size_t offset = 0;
    std::size_t length = 0;
};

/// A compressed stream the last scan_body opened whose decoding the end of the body cut
/// short (decode::content's `cut`: it decoded without an error to the last byte it was
/// given and had not ended). For a body seen in windows (body_stream.hpp) the rest of it
/// is in bytes this scan did not have, and what those decode to was not inspected. Two
/// kinds: a stream in the body as it is (after its Content-Encoding), which runs to the
/// end of the body; a stream decoded from an encoded run of the body (base64, hex, a chain
/// of them) that ends within 16 bytes of the end of the body. Not recorded: streams inside
/// a stream of the first kind (cut short because it is, or inside it when it is complete),
/// in leftovers, in extracted views (JSON strings, multipart parts: their bytes are in the
/// body as it is too).
struct cut_stream {
    /// Offset in the body of the stream's first byte, or of the encoded run it came from.
    std::size_t at = 0;
    /// The stream's name as sniffed ("gzip", "zstd", "bzip2", "deflate" for a zlib stream,
    /// "xz", "lzma", "raw-deflate") for the first kind; empty for one decoded from a run.
    std::string outer;
};

class variant_scanner {
public:
    /// `s` must outlive this object.
    explicit variant_scanner(detectors::scanner& s, variant_options o = {});
    ~variant_scanner();
    variant_scanner(const variant_scanner&) = delete;
    variant_scanner& operator=(const variant_scanner&) = delete;

    /// Any text (a header value, a file): raw and every decoded variant.
    variant_status scan(std::string_view data, std::string_view location,
                        std::vector<variant_finding>& out);

    /// A request target (origin-form or absolute) and the destination host: the raw
    /// target, then its path segments, query names and values (percent-decoded) and the
    /// host labels joined without dots, and the joined views (joined.hpp) of the path
    /// segments and of the query values. Location "url".
    variant_status scan_url(std::string_view target, std::string_view host,
                            std::vector<variant_finding>& out);

    /// A whole request body: Content-Encoding undone (stacked codings in reverse order;
    /// unknown or malformed -> bad_encoding; over budget -> over_budget), then scanned as
    /// text and extracted by Content-Type (JSON strings and keys, form names and values,
    /// multipart parts with their Content-Transfer-Encoding, event-stream data). Location
    /// "body". A coded body is also scanned as it is on the wire (variant "raw"), and every
    /// decoder leftover (decode::leftovers: gzip header fields, zstd skippable frames,
    /// bytes after the end of a stream) is scanned as variant "<coding>>leftover", and
    /// decoded again when it holds a further stream ("gzip>leftover>gzip"). Compressed
    /// streams without a Content-Encoding are opened by their magic (decode::sniffed: gzip,
    /// zstd, zlib, bzip2, xz, lzma; variant "xz" for an .xz body), at the start and after
    /// other bytes of the (decoded) body (decode::embedded_offsets; variant "embedded>xz",
    /// each start a candidate). An .xz body that is corrupt (not cut short) is
    /// bad_encoding. The values of a JSON body (by Content-Type, or
    /// any body starting with '{' or '['), a form, the parts of a multipart body and the
    /// events of an event stream are scanned joined (src/joined.hpp): a finding that spans
    /// several values has variant "<extraction>:<ordinals>" ("json:2+5", 1-based, in
    /// document order), and its offset and length are into the joined lines, not the body.
    /// A git push (Content-Type application/x-git-receive-pack-request) and any body that
    /// is a packfile ("PACK" at offset 0, `sluice scan` of a .pack) are opened with
    /// git.hpp: the commands, and every commit, tag, tree's names and blob the pack
    /// carries, deltas resolved, each under its own location ("git:blob:<path>", a path
    /// that itself holds a finding shown as "git:blob:[redacted]"); their inflated size is
    /// charged to the decode budget. A push that cannot be read whole (corrupt, cut short,
    /// a thin pack) is bad_encoding; one that inflates past the budget over_budget.
    /// An archive (archive.hpp: zip, tar, 7z, ...) as the body, as a multipart part, after
    /// other bytes (a zip) or inside a decoded buffer (a tar in a gzip, a zip in base64)
    /// has each member scanned under "archive:<member>" ("archive:a.zip/b.txt" nested,
    /// "archive:[names]" for the member names, "archive:[redacted]" for a member whose
    /// name holds a finding), variant "<chain>>zip"; each archive layer is a depth. One
    /// that cannot be read whole (corrupt, encrypted) is bad_encoding.
    variant_status scan_body(std::string_view body, std::string_view content_type,
                             std::string_view content_encoding, std::vector<variant_finding>& out);

    /// The seam between two messages or requests (seam.hpp): `before.last` then
    /// `after.first`, joined (src/joined.hpp) and scanned with every decoder, under
    /// `location`. Only findings that take bytes from both sides are reported (the rest
    /// were each message's own), with variant "seam:<ordinals>" (1-based over before.last
    /// then after.first: "seam:4+5"); offsets are into the joined lines. Charged to this
    /// message's budget. Nothing to do when either side is empty or `joined` is off.
    variant_status scan_seam(const message_ends& before, const message_ends& after,
                             std::string_view location, std::vector<variant_finding>& out);
    /// The ends (seam.hpp) of the last body scan_body saw, after its Content-Encoding was
    /// undone: from its joined view (JSON, form, SSE values) or else its words. Empty
    /// before the first scan_body, after reset(), and when decoders are off.
    const message_ends& ends() const noexcept { return ends_; }
    /// The compressed streams the last scan_body cut short (cut_stream), in the order it
    /// opened them; empty before the first scan_body and after reset().
    const std::vector<cut_stream>& cut_streams() const noexcept { return cuts_; }
    /// Starts a new message: budget counters back to zero.
    void reset() noexcept;

    /// Work counters since the last reset (for benchmarks and stats).
    struct stats {
        std::size_t input_bytes = 0;
        std::size_t decoded_bytes = 0;
        std::size_t candidates = 0;
        std::size_t scanned_variants = 0; ///< decoded buffers that were scanned
    };
    const stats& counters() const noexcept { return stats_; }

private:
    struct ctx;
    struct segment;
    struct level;
    struct walk; ///< one candidates() call (variant_candidates.cpp)
    variant_status process(std::string_view data, std::string& chain, std::size_t depth,
                           std::size_t outer_off, std::size_t outer_len, ctx& c);
    variant_status scan_buffer(std::string_view data, const std::string& chain,
                               std::size_t outer_off, std::size_t outer_len, ctx& c,
                               const std::vector<segment>* segs);
    variant_status candidates(std::string_view data, std::string& chain, std::size_t depth,
                              std::size_t outer_off, std::size_t outer_len, ctx& c);
    variant_status open_compressed(std::string_view data, std::string& chain, std::size_t depth,
                                   std::size_t outer_off, std::size_t outer_len, ctx& c);
    variant_status try_decoded(std::string_view decoded, std::string_view step, std::string& chain,
                               std::size_t depth, std::size_t off, std::size_t len, bool tail,
                               std::size_t from, std::size_t src, ctx& c);
    variant_status scan_leftovers(const std::vector<std::string>& parts, std::string_view coding,
                                  const std::string& prefix, std::size_t nest, ctx& c);
    variant_status scan_embedded(std::string_view data, const std::string& prefix, ctx& c,
                                 bool leftover);
    variant_status scan_joined(const joined::view& v, ctx& c);
    variant_status scan_lines(std::string_view lines, std::size_t window_at, std::string& chain,
                              ctx& c);
    bool one_value_explains(std::string_view lines, const std::vector<joined::mark>& marks,
                            std::size_t off, std::size_t len);
    variant_status scan_body_joined(std::string_view data, std::string_view ct, ctx& c,
                                    const joined::view* json);
    variant_status scan_git(std::string_view data, std::string_view ct, ctx& c);
    variant_status scan_archives(std::string_view data, const std::string& prefix,
                                 std::size_t depth, std::size_t outer_off, std::size_t outer_len,
                                 ctx& c);
    bool charge(std::size_t decoded_bytes) noexcept;
    bool too_deep(const std::vector<segment>& segs, std::size_t level) const;
    /// Records a stream decoded from the run [at, end) of the body that was cut short.
    void note_cut(std::size_t at, std::size_t end);
    std::size_t decode_room() const noexcept;

    detectors::scanner& scanner_;
    variant_options opts_;
    stats stats_;
    std::vector<detectors::finding> scratch_;
    message_ends ends_;
    std::vector<cut_stream> cuts_;
    /// The body's size while scan_body processes the body itself (offsets in cut_stream
    /// are into it); 0 while it processes anything else (a view, a stream's bytes).
    std::size_t cut_end_ = 0;
};

} // namespace sluice::dlp
