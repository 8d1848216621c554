// Offline validators run after a hit is confirmed by RE2. A rule names one in its
// `validator` field and the validator sees the secret (the capture group 1 of the rule's
// pattern, or the whole match). Two kinds (issue 25):
//   - gates ("pem", "jwt", "luhn", "iban", "entropy", "placeholder", "bip39", "nonfiller"): the
//   shape
//     alone is not specific (a digit run, a word list, a base64 blob), so a finding is
//     reported only if the validator accepts;
//   - checksums ("github", "npm", "grafana", "cloudflare", "atlassian"): the rule's
//     pattern is a vendor prefix plus a fixed shape, specific on its own. The finding is
//     reported whatever the checksum says; a checksum that verifies keeps the rule's
//     `confidence`, one that does not gives unverified_confidence() of it. A hand-typed
//     look-alike (ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef01) is therefore still a finding.
// All functions are pure, allocation-light, never throw, and are safe to call from any
// thread.
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
//   "github_strict" a gate: the "github" CRC32 must verify. For shapes that are a token
//                 only with it: a classic prefix in capitals (GHP_...), or the 36
//                 characters without a prefix (checked as "_" + the 36).
//   "nonfiller"   rejects documentation filler only (looks_like_filler below): for
//                 look-alike shapes that must be reported even when hand-typed.
//   "bip39"       BIP-39 mnemonic: 12, 15, 18, 21 or 24 words (single spaces, any letter
//                 case) from the English word list, and the checksum holds: the last
//                 N/3 bits of the 11-bit word indices equal the first N/3 bits of
//                 SHA-256(entropy), N = word count (github.com/bitcoin/bips bip-0039).
//   "grafana"     Grafana service account token glsa_<32 alnum>_<8 hex>: the hex is the
//                 CRC-32 of "glsa_<32>" in little-endian byte order, lower case
//                 (grafana/grafana pkg/components/satokengen/tokengen.go, CalculateChecksum).
//   "cloudflare"  Cloudflare scannable credential cfk_ / cfut_ / cfat_ + 40 characters +
//                 8 lower-case hex: the CRC-32 of the 40 characters, big-endian
//                 (developers.cloudflare.com/fundamentals/api/get-started/token-formats/
//                 states "40 characters and a CRC32 checksum"; the covered bytes and hex
//                 encoding were established on publicly posted cfut_ tokens).
//   "atlassian"   Atlassian API / access token ATATT3... / ATCTT3...: the last 8 characters
//                 are upper-case hex of the CRC-32 of everything before them, '=' included
//                 (DataDog/dd-sensitive-data-scanner atlassian_token_checksum.rs; checked
//                 against publicly posted tokens of both prefixes).
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::detectors {

/// True if `name` is "" (no validator) or one of the names above.
bool is_known_validator(std::string_view name) noexcept;

/// True for the checksum validators listed above (a failed check lowers confidence, it
/// does not drop the finding); false for gates, "" and unknown names.
bool is_checksum_validator(std::string_view name) noexcept;

/// True if one byte value makes up at least half of `token` (ghp_xxxx..., sk_live_0000...):
/// a documentation filler, dropped when its checksum does not verify either.
bool looks_like_filler(std::string_view token) noexcept;

/// Confidence of a finding whose checksum did not verify: half the rule's `confidence`
/// (0..1 in, 0..0.5 out), so that a verified token always ranks above a look-alike.
constexpr double unverified_confidence(double rule_confidence) noexcept {
    return rule_confidence / 2;
}

/// Runs validator `name` on `secret`. "" accepts everything; unknown names reject.
bool validate(std::string_view name, std::string_view secret) noexcept;

/// CRC-32 (IEEE 802.3 polynomial, as zlib's crc32).
std::uint32_t crc32(std::string_view data) noexcept;

/// GitHub / npm token checksum: see "github" above. `token` is the whole token.
bool github_checksum_ok(std::string_view token) noexcept;
/// 6-character base62 (0-9A-Za-z) encoding of `value`, left-padded with '0'.
void base62_6(std::uint32_t value, char out[6]) noexcept;

/// BIP-39 check: see "bip39" above. `phrase` is the words separated by single spaces.
bool bip39_ok(std::string_view phrase) noexcept;

/// Grafana service account token checksum: see "grafana" above. `token` is the whole token.
bool grafana_checksum_ok(std::string_view token) noexcept;

/// Cloudflare cfk_/cfut_/cfat_ checksum: see "cloudflare" above. `token` is the whole token.
bool cloudflare_checksum_ok(std::string_view token) noexcept;

/// Atlassian ATATT3/ATCTT3 checksum: see "atlassian" above. `token` is the whole token.
bool atlassian_checksum_ok(std::string_view token) noexcept;

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
