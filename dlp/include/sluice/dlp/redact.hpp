// Redaction of secrets from strings that leave the data path as text: audit record
// fields (url, method, approval entries), log lines and error messages. Whatever a client
// chose goes through the detectors before it is written, whether or not its exchange was
// inspected, resolved or even parsed as far as inspection.
//
// Thread safety: uses the caller's per-thread detectors::scanner; call on that thread.
#pragma once

#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/variants.hpp"

#include <string>
#include <string_view>

namespace sluice::dlp {

/// The marker that replaces a secret.
inline constexpr std::string_view redacted_marker = "[redacted]";

/// `text` with every secret the detectors (all rules, any category, plus `protect`'s
/// values) find in it, raw or decoded (variants.hpp), replaced by "[redacted]":
/// - a raw finding: exactly the secret's bytes;
/// - a decoded variant: the whole encoded run it was decoded from;
/// - a finding in a view whose offsets do not map back to `text` (labels or segments
///   joined): the whole of `text`;
/// - then every host-name-shaped run left (letters, digits, '-', '_' with a dot: a URL's
///   authority, a CONNECT "host:port") is scanned through its host views (hostname.hpp:
///   labels joined, base32/base32hex decoded; runs over 253 bytes in overlapping windows)
///   and the labels that carried a finding become "[redacted]" (redact_host), so a host
///   spelling a secret in an encoding only host views decode is never recorded;
/// - over the decode budget or a scanner error: the whole of `text` (fail closed).
/// Text with no finding is returned unchanged. Never throws except std::bad_alloc.
std::string redact_secrets(std::string_view text, detectors::scanner& s, const variant_options& o);

} // namespace sluice::dlp
