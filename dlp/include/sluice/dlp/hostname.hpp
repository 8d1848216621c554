// Destination host names before resolution (issue 25). A name is data that leaves the
// machine in the DNS query, before any request is sent, so the inspector scans it first:
// these are the views of a name it scans, the hostname-exfiltration score for encoded or
// random-looking subdomain labels, and the audit redaction of the labels that carried a
// finding. Labels are the dot-separated parts of a host name (RFC 1034 section 3.1); the
// registrable domain comes from the Public Suffix List as built into libpsl
// (publicsuffix.org/list/, private section included, so "d1.cloudfront.net" is its own
// registrable domain).
//
// Thread safety: pure functions over their arguments (libpsl's built-in list is immutable
// and shared); safe from any thread. Nothing here throws except std::bad_alloc.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dlp {

struct finding_record;

/// Byte range [begin, end) of one label in the host.
struct host_label {
    std::size_t begin = 0;
    std::size_t end = 0;
};

/// The labels of `host` in order (empty labels of "a..b" are kept as empty ranges).
std::vector<host_label> host_labels(std::string_view host);

/// One view of a host name handed to the detectors.
struct host_view {
    std::string bytes;   ///< the bytes to scan
    std::string variant; ///< "raw" (the host, or a run of labels with their dots),
                         ///< "labels" (a run joined without dots), "labels>base32",
                         ///< "labels>base32hex" (the run decoded; never input bytes)
    /// Host offset of each byte of `bytes` for the undecoded views; empty for decoded ones,
    /// whose every byte maps to the whole run [run_begin, run_end).
    std::vector<std::size_t> origin;
    std::size_t run_begin = 0; ///< host offset of the run's first byte
    std::size_t run_end = 0;   ///< host offset one past the run's last byte
};

/// Calls `each` with every view of `host`: the whole name; each label alone; for every run
/// of two or more consecutive labels, the run with its dots and joined without them; and for every
/// run (one label or more) whose joined bytes are all in the base32 alphabet of RFC 4648
/// section 6 (A-Z, 2-7, any case, no padding) or base32hex of section 7 (0-9, A-V), that
/// run decoded (trailing bits that do not fill a byte are dropped; at least 10 characters).
/// Hex, base64url and percent encodings inside a view are found by the variant pipeline
/// that scans it (variants.hpp). Stops early and returns false if `each` returns false.
/// Work: O(labels^2 x host length), at most ~127^2 x 253 bytes for a valid DNS name.
bool for_each_host_view(std::string_view host, const std::function<bool(const host_view&)>& each);

/// The host range a finding in `v` at [offset, offset + length) came from: the exact bytes
/// for an undecoded view, the whole run for a decoded one. Out-of-range input is clamped.
host_label host_range(const host_view& v, std::size_t offset, std::size_t length) noexcept;

/// `dlp.hostname_exfil` (config): the hostname-exfiltration detector.
struct hostname_exfil_settings {
    bool enabled = true;
    /// Score at or above which a name is a finding: the estimated random bytes carried by
    /// its subdomain labels (see hostname_exfiltration). 20 is about 40 hex or 32 base32
    /// characters of random data; the longest single random label of a real-world name in
    /// tests/dlp/data/hostnames.txt scores about 17.
    double min_score = 20;
    /// A name is scored only if one subdomain label this long (bytes) is random-looking.
    std::size_t min_label_length = 16;
    /// Host patterns (host_matches: "*", "*.example.com", exact) never scored.
    std::vector<std::string> allow;
};

/// Rule id and category of hostname-exfiltration findings.
inline constexpr std::string_view hostname_exfil_rule = "hostname-exfiltration";
inline constexpr std::string_view hostname_exfil_category = "exfiltration";

/// True if `label` looks random: at least `min_length` bytes and either mixes digits and
/// letters with frequent switches between them (hex, base32, base36: at least max(3,
/// length/6) digit-letter switches, 2+ digits and 2+ letters), or is 16+ letters and digits
/// only, with a digit, 8+ letters and Shannon entropy >= 4.0 bits per byte (base32 with few
/// digits), or is 24+
/// letters with
/// Shannon entropy >= 3.8 bits per byte and at most 25% vowels (random letters; English
/// has ~38%). Hyphenated words, version strings and region names do not qualify.
bool random_looking_label(std::string_view label, std::size_t min_length) noexcept;

/// What the detector found in a name.
struct hostname_exfil_hit {
    double score = 0;        ///< estimated random bytes (see hostname_exfiltration)
    std::size_t begin = 0;   ///< host offset of the first random-looking label
    std::size_t end = 0;     ///< one past the last one
    std::string fingerprint; ///< fingerprint() of those labels joined without dots
};

/// Scores the subdomain labels of `host` (those left of its registrable domain; for an
/// IP literal or a name that is itself a public suffix, nothing is scored). A name is
/// scored only if one of those labels is random_looking_label() at `s.min_label_length`;
/// then every hyphen-separated part of 6+ bytes of any subdomain label that is
/// random_looking_label() at 6 adds length x Shannon entropy / 8 (so words around a random
/// part, as in "search-mydomain-<id>", add nothing, and the short last label of cut-up
/// data adds its share). Returns a hit when `s.enabled`, the host matches no `s.allow`
/// pattern and the score reaches `s.min_score`; nullopt otherwise.
std::optional<hostname_exfil_hit> hostname_exfiltration(std::string_view host,
                                                        const hostname_exfil_settings& s);

/// `host` with every label that overlaps a finding of location "host" (offset/length into
/// `host`) replaced by "[redacted]"; other findings are ignored. For audit records, logs
/// and answers: "[redacted].[redacted].attacker.example".
std::string redact_host(std::string_view host, const std::vector<finding_record>& findings);

} // namespace sluice::dlp
