// Offline validators run after a hit is confirmed by RE2. A rule names one in its
// `validator` field; a finding is reported only if the validator accepts the secret
// (the capture group 1 of the rule's pattern, or the whole match). All functions are
// pure, allocation-light, never throw, and are safe to call from any thread.
//
// Validator names a rule may use (anything else is a ruleset compile error):
//   "github"      GitHub classic tokens and npm tokens: PREFIX_ + 30 base62 + 6-char
//                 base62 CRC32 of the 30 random characters
//                 (github.blog 2021-04-05 "Behind GitHub's new authentication token formats";
//                 github.blog 2021-09-23 "Announcing npm's new access token format").
//                 Alias "npm".
//   "pem"         PEM private key block: the base64 body (line breaks, literal "\n" escapes
//                 and spaces ignored) decodes to a DER SEQUENCE (0x30), or to an
//                 "openssh-key-v1\0" blob, or is an encrypted/PGP armour body (RFC 7468,
//                 RFC 4880 section 6, OpenSSH PROTOCOL.key).
//   "jwt"         header segment base64url-decodes to a JSON object with an "alg" member
//                 (RFC 7519 section 5, RFC 7515 section 4.1.1).
//   "luhn"        digits (spaces and dashes ignored) pass the Luhn mod-10 check (ISO/IEC 7812-1).
//   "iban"        ISO 13616 mod-97 check.
//   "entropy"     generic secrets: not a placeholder and Shannon entropy >= 3.0 bits/char
//                 with at least 8 characters.
//   "placeholder" only the placeholder filter (no entropy threshold).
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::detectors {

/// True if `name` is "" (no validator) or one of the names above.
bool is_known_validator(std::string_view name) noexcept;

/// Runs validator `name` on `secret`. "" accepts everything; unknown names reject.
bool validate(std::string_view name, std::string_view secret) noexcept;

/// CRC-32 (IEEE 802.3 polynomial, as zlib's crc32).
std::uint32_t crc32(std::string_view data) noexcept;

/// GitHub / npm token checksum: see "github" above. `token` is the whole token.
bool github_checksum_ok(std::string_view token) noexcept;
/// 6-character base62 (0-9A-Za-z) encoding of `value`, left-padded with '0'.
void base62_6(std::uint32_t value, char out[6]) noexcept;

/// PEM / OpenSSH / PGP private key body check: see "pem" above. `block` is the whole
/// match from "-----BEGIN" to the END line.
bool pem_body_ok(std::string_view block) noexcept;

/// JWT header check: see "jwt" above. `token` is header.payload[.signature].
bool jwt_header_ok(std::string_view token) noexcept;

/// Luhn mod-10 over the digits of `number` (spaces and dashes ignored; 12..19 digits).
bool luhn_ok(std::string_view number) noexcept;

/// IBAN mod-97 (spaces ignored).
bool iban_ok(std::string_view iban) noexcept;

/// Shannon entropy of the byte distribution of `s`, in bits per byte.
double shannon_entropy(std::string_view s) noexcept;

/// True for obvious placeholders: ${VAR}, {{var}}, <your-key>, xxxx, changeme, "example",
/// "password", repeated single characters, all-same-class sequences like 1234567890.
bool looks_like_placeholder(std::string_view s) noexcept;

} // namespace sluice::detectors
