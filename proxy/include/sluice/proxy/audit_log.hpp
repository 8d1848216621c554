// The audit sink: one JSON object per line per decision (CONTRACT.md "Audit record"),
// appended to a file the agent cannot write, chained with SHA-256 (`prev`, `hash`).
// Never holds secret bytes: findings carry fingerprints only.
// Thread safety: append() may be called from any thread (internal mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::proxy {

struct audit_finding {
    std::string rule;
    std::string location; ///< url, header:<name>, body
    std::string variant;  ///< raw, or a decode chain
    std::size_t offset = 0;
    std::string fingerprint; ///< sha256:<16 hex>
};

/// One decision. `ts` and `seq`, `prev` and `hash` are filled in by the log.
struct audit_record {
    std::string flow;
    std::string identity; ///< "" when unresolved (written as null)
    std::string source;   ///< client address:port
    std::string method;
    std::string url;      ///< absolute URL (https://host:port/path?query), query values redacted
    std::string decision; ///< allow, deny, supervise_approved, supervise_denied
    std::string reason;   ///< CONTRACT.md reason code; "" for a plain allow
    std::vector<audit_finding> findings;
    std::uint64_t bytes_up = 0;   ///< request body bytes sent upstream
    std::uint64_t bytes_down = 0; ///< response body bytes relayed to the client
    std::uint64_t duration_ms = 0;
    bool inspected = true; ///< false for an explicitly uninspected tunnel
};

class audit_log {
public:
    /// Opens (creating with mode 0600, parents 0700) `path` for appending and continues
    /// the hash chain from its last line. Error message names the file.
    static std::expected<std::unique_ptr<audit_log>, std::string>
    open(const std::filesystem::path& path, bool fsync_always);

    ~audit_log();

    /// Appends one record (with ts, seq, prev, hash) and, with fsync_always, fsyncs.
    /// Returns false if the write failed; the caller must fail the flow closed.
    bool append(const audit_record& r);

    /// False once a write has failed (new flows are denied with 503 until it recovers).
    bool healthy() const;

    /// Replaces query values whose parameter names in `flagged` (or all when `all`) with
    /// "[redacted]". The scheme/host/path are kept.
    static std::string redact_query(std::string_view url, bool all);

private:
    audit_log() = default;
    mutable std::mutex mutex_;
    int fd_ = -1;
    bool fsync_always_ = true;
    bool healthy_ = true;
    std::uint64_t seq_ = 0;
    std::string prev_hash_;
    std::filesystem::path path_;
};

} // namespace sluice::proxy
