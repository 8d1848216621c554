// The per-exchange inspector: neutral views of a request in, a verdict out. It decides
// with the detectors on the request target, header values and whole body (up to the
// policy's max_body). Not thread safe: one inspector per exchange, on the thread that
// owns `scanner`.
#pragma once

#include "sluice/dlp/policy.hpp"
#include "sluice/detectors/scanner.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
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
    std::string location;    ///< "url", "header:<lower-case name>", "body"
    std::string variant;     ///< "raw" or a decode chain such as "gzip>base64"
    std::size_t offset = 0;  ///< byte offset within that location's (decoded) data
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

class inspector {
public:
    inspector(const policy& p, detectors::scanner& s);

    /// Scans the target (URL) and every header value. Never throws.
    verdict on_head(const request_view& req);
    /// Scans the whole request body (already de-chunked). Bodies larger than
    /// policy.dlp.max_body give 413 body_too_large. Never throws.
    verdict on_body(std::string_view body);

private:
    verdict decide(std::vector<finding_record> findings) const;
    void scan_into(std::string_view data, std::string_view location,
                   std::vector<finding_record>& out);

    const policy& policy_;
    detectors::scanner& scanner_;
    std::vector<detectors::finding> scratch_;
};

} // namespace sluice::dlp
