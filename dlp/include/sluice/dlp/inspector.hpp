// The per-exchange inspector: neutral views of a request in, a verdict out. It decides
// with the detectors on the request target, header values and whole body (up to the
// policy's max_body). Not thread safe: one inspector per exchange, on the thread that
// owns `scanner`.
#pragma once

#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/policy.hpp"
#include "sluice/dlp/variants.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::dlp {

struct header_view {
    std::string_view name;
    std::string_view value;
};

/// A request head as the proxy parsed it (Beast), free of Beast types.
struct request_view {
    std::string_view method; ///< upper-case token, e.g. "POST"
    std::string_view target; ///< origin-form target as sent upstream ("/v1/x?q=1")
    std::string_view host;   ///< normalised destination host
    std::uint16_t port = 0;
    std::span<const header_view> headers;
};

/// A finding as reported to the client (rule ids), the audit (all fields) and metrics.
struct finding_record {
    std::string rule;        ///< rule id
    std::string location;    ///< "url", "header:<lower-case name>", "head" (method and field
                             ///< names), "host" (the destination name), "body"
    std::string variant;     ///< "raw" or a decode chain such as "gzip>base64"
    std::size_t offset = 0;  ///< byte offset within that location's (decoded) data
    std::size_t length = 0;  ///< length in bytes of the secret at `offset` (for redaction)
    std::string fingerprint; ///< "sha256:<16 hex>"
};

enum class verdict_kind {
    forward,   ///< send it on
    deny,      ///< answer the client with `status` and `reason`
    supervise, ///< hold for a person (issue 7); until then treated as deny by the proxy
};

struct verdict {
    verdict_kind kind = verdict_kind::forward;
    int status = 200;   ///< HTTP status to answer with when not forwarding
    std::string reason; ///< CONTRACT.md reason code: dlp_finding, body_too_large, ...
    std::vector<finding_record> findings;
};

/// Verdicts (CONTRACT.md "What a client gets"):
/// - no finding left after filtering: forward, status 200;
/// - findings with `dlp.on_finding` deny: deny, 403 `dlp_finding`;
/// - findings with supervise: verdict_kind::supervise, 403 `dlp_finding` (the proxy holds
///   or, until issue 7, denies with that status);
/// - findings with log: forward, findings kept for audit and metrics;
/// - body over `dlp.max_body`: deny, 413 `body_too_large` (nothing is scanned);
/// - the scanner failed (Hyperscan internal error) or an allocation failed: deny, 500
///   `internal` — fail closed, never forward unscanned bytes;
/// - the decode budget (variants.hpp) was exceeded, including a decompression bomb:
///   deny, 413 `decode_budget`;
/// - the body's Content-Encoding is unknown or malformed (truncated stream, bytes that
///   are not a stream): deny, 400 `bad_encoding`.
/// Findings are filtered by `dlp.detectors` (rule id, category or "all") and `dlp.ignore`
/// (same rule and the same value, compared by fingerprint). Every location goes through
/// the variant pipeline (variants.hpp): `variant` is "raw" or the decode chain, and
/// offset/length are those of variant_finding (for decoded variants, the wrapped run in
/// the outermost buffer). The body is decoded with the Content-Type and Content-Encoding
/// seen by on_head.
class inspector {
public:
    /// `p` and `s` must outlive the inspector.
    inspector(const policy& p, detectors::scanner& s);
    /// Same, with variant options (budget, protected values, decoders off).
    inspector(const policy& p, detectors::scanner& s, variant_options o);

    /// Scans the target (location "url"), every header value (location
    /// "header:<lower-case name>"), except `Proxy-Authorization`, which is the proxy's own
    /// credential and never forwarded, and the method with every field name, one per line
    /// (location "head": offset 0 is the method's first byte). Never throws.
    verdict on_head(const request_view& req);
    /// Scans a destination host name (normalised, as from a CONNECT authority or an
    /// absolute-form target) before it is resolved, location "host": every view of
    /// for_each_host_view (the name, every run of consecutive labels with and without its
    /// dots, base32/base32hex decodings of the runs) through the variant pipeline (hex,
    /// base64url, percent and the other decoders), then the hostname-exfiltration detector
    /// (hostname.hpp, `dlp.hostname_exfil`; rule "hostname-exfiltration", independent of
    /// `dlp.detectors`). Offsets and lengths are into `host` as given (the bytes of the
    /// secret for undecoded views, the whole run of labels for decoded ones), so
    /// redact_host() can hide the labels that carried a finding; `variant` is "raw",
    /// "labels", "labels>base32", ... followed by the pipeline's chain. A finding decides
    /// like any other (dlp.on_finding). Never throws. Call it before any DNS query for the
    /// name.
    verdict on_destination(std::string_view host);
    /// Scans the whole request body (already de-chunked), location "body". Bodies larger
    /// than policy.dlp.max_body give 413 body_too_large. Never throws.
    verdict on_body(std::string_view body);
    /// Starts the next message of a session whose messages are scanned one by one with
    /// on_body (a WebSocket's): the decode budget (variant_budget) counts from zero again,
    /// as for a new request. Content-Type and Content-Encoding stay as on_head saw them.
    void next_message() noexcept { variants_.reset(); }
    /// The ends (seam.hpp) of the body on_body scanned last, decoded: what the next
    /// message or request of the same identity and destination is joined with.
    const message_ends& ends() const noexcept { return variants_.ends(); }
    /// The compressed streams of the body on_body scanned last whose decoding was cut short
    /// by the end of the body (variants.hpp cut_stream): for a body seen in windows, what
    /// the next window would have to go on decoding.
    const std::vector<cut_stream>& cut_streams() const noexcept { return variants_.cut_streams(); }
    /// Scans the seam between `before` (the ends of the previous message or request) and
    /// `after` (this one's: ends(), or ends_of the message) with
    /// variant_scanner::scan_seam, findings under `location`: a secret whose first part
    /// ended the previous message and whose rest starts this one. Decides like on_body;
    /// forward when either side is empty. Call it after on_body, before the message is
    /// forwarded (the seam is charged to that message's decode budget). Never throws.
    verdict on_seam(const message_ends& before, const message_ends& after,
                    std::string_view location);

private:
    verdict decide(std::vector<finding_record> findings) const;
    static void add_host_finding(const host_view& view, finding_record r,
                                 std::vector<finding_record>& out);
    bool wanted(const detectors::finding& f) const noexcept;
    bool ignored(const detectors::finding& f, std::string_view data) const;
    /// Filters and converts pipeline findings; a non-ok status becomes its deny verdict.
    bool take(variant_status st, std::vector<variant_finding>& found,
              std::vector<finding_record>& out, verdict& failed) const;

    const policy& policy_;
    detectors::scanner& scanner_;
    std::vector<detectors::finding> scratch_;
    /// policy.dlp.ignore with each exact value replaced by its fingerprint.
    std::vector<std::pair<std::string, std::string>> ignore_fingerprints_;
    variant_scanner variants_;
    std::string content_type_;     ///< from on_head, for on_body
    std::string content_encoding_; ///< from on_head (all Content-Encoding fields, joined)
};

} // namespace sluice::dlp
