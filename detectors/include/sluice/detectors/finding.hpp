// A confirmed detector hit. Never carries the secret bytes: only their range in the
// scanned buffer and a fingerprint. Thread safety: plain value type.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::detectors {

struct finding {
    std::string rule_id;
    std::string category;
    std::size_t begin = 0; ///< byte offset of the secret in the scanned buffer (inclusive)
    std::size_t end = 0;   ///< byte offset one past the secret (exclusive)
    double confidence = 0;
    /// "sha256:" + first 16 hex digits of SHA-256(secret); for category "private-key"
    /// of the secret with separators removed (see key_material_fingerprint).
    std::string fingerprint;
};

/// "sha256:" + first 16 lower-case hex digits of SHA-256(value) (CONTRACT.md, audit record).
std::string fingerprint(std::string_view value);

/// fingerprint() of `value` without whitespace (space, tab, CR, LF) and without the literal
/// two-byte escapes "\\n" and "\\r": one private key written over several lines, flattened
/// onto one line, or escaped inside a JSON string gets one fingerprint. Used for findings
/// of category "private-key".
std::string key_material_fingerprint(std::string_view value);

} // namespace sluice::detectors
