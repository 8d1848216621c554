#include "sluice/detectors/validators.hpp"

#include "detail/bip39_words.hpp"

#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

namespace sluice::detectors {

namespace {

constexpr std::string_view base62_alphabet =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

int b64_value(char c) noexcept {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

// Decodes up to out.size() bytes of base64 / base64url from `in`, skipping whitespace and
// literal "\n" / "\r" escapes (private keys pasted into JSON strings). Stops at '=' or at
// any other byte. Returns the number of bytes written.
std::size_t b64_decode_prefix(std::string_view in, unsigned char* out, std::size_t cap) noexcept {
    std::size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (std::size_t i = 0; i < in.size() && n < cap; ++i) {
        const char c = in[i];
        if (c == '\\' && i + 1 < in.size() && (in[i + 1] == 'n' || in[i + 1] == 'r')) {
            ++i;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            continue;
        const int v = b64_value(c);
        if (v < 0)
            break;
        acc = (acc << 6) | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = static_cast<unsigned char>((acc >> bits) & 0xff);
        }
    }
    return n;
}

bool contains_icase(std::string_view hay, std::string_view needle) noexcept {
    if (needle.size() > hay.size())
        return false;
    for (std::size_t i = 0; i + needle.size() <= hay.size(); ++i) {
        std::size_t j = 0;
        while (j < needle.size() &&
               std::tolower(static_cast<unsigned char>(hay[i + j])) == needle[j]) {
            ++j;
        }
        if (j == needle.size())
            return true;
    }
    return false;
}

// Parses exactly 8 hex digits. `upper` / `lower` select the accepted letter cases, so a
// validator can insist on the case its issuer writes.
bool parse_hex32(std::string_view hex, bool upper, bool lower, std::uint32_t& out) noexcept {
    if (hex.size() != 8)
        return false;
    std::uint32_t v = 0;
    for (const char c : hex) {
        unsigned d = 0;
        if (c >= '0' && c <= '9') {
            d = static_cast<unsigned>(c - '0');
        } else if (upper && c >= 'A' && c <= 'F') {
            d = static_cast<unsigned>(c - 'A' + 10);
        } else if (lower && c >= 'a' && c <= 'f') {
            d = static_cast<unsigned>(c - 'a' + 10);
        } else {
            return false;
        }
        v = (v << 4) | d;
    }
    out = v;
    return true;
}

bool is_alnum(char c) noexcept {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

} // namespace

std::uint32_t crc32(std::string_view data) noexcept {
    return static_cast<std::uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

void base62_6(std::uint32_t value, char out[6]) noexcept {
    for (int i = 5; i >= 0; --i) {
        out[i] = base62_alphabet[value % 62];
        value /= 62;
    }
}

bool github_checksum_ok(std::string_view token) noexcept {
    // PREFIX_ (ghp_, gho_, ghu_, ghs_, ghr_, npm_) + 30 random + 6 checksum.
    const auto us = token.find('_');
    if (us == std::string_view::npos)
        return false;
    const std::string_view body = token.substr(us + 1);
    if (body.size() != 36)
        return false;
    char expect[6];
    base62_6(crc32(body.substr(0, 30)), expect);
    return std::memcmp(expect, body.data() + 30, 6) == 0;
}

bool bip39_ok(std::string_view phrase) noexcept {
    const auto words = detail::bip39_english_words();
    // 24 words x 11 bits = 264 bits = 33 bytes: entropy (up to 32 bytes) then checksum bits.
    std::array<unsigned char, 33> bits{};
    std::size_t nwords = 0;
    std::size_t nbits = 0;
    std::size_t i = 0;
    while (i < phrase.size()) {
        if (phrase[i] == ' ') {
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < phrase.size() && phrase[j] != ' ')
            ++j;
        const std::size_t len = j - i;
        if (len < 3 || len > 8 || nwords == 24)
            return false;
        // The rules match case-insensitively; the list is lower case.
        char w[8];
        for (std::size_t k = 0; k < len; ++k) {
            char c = phrase[i + k];
            if (c >= 'A' && c <= 'Z')
                c = static_cast<char>(c - 'A' + 'a');
            if (c < 'a' || c > 'z')
                return false;
            w[k] = c;
        }
        const std::string_view word(w, len);
        const auto it = std::lower_bound(words.begin(), words.end(), word);
        if (it == words.end() || *it != word)
            return false;
        const auto index = static_cast<unsigned>(it - words.begin());
        for (int b = 10; b >= 0; --b) {
            if ((index >> b) & 1U)
                bits[nbits / 8] =
                    static_cast<unsigned char>(bits[nbits / 8] | (0x80U >> (nbits % 8)));
            ++nbits;
        }
        ++nwords;
        i = j;
    }
    if (nwords < 12 || nwords % 3 != 0)
        return false;
    // ENT + ENT/32 = 11 * nwords, so the checksum is nwords/3 bits (4..8) and the entropy
    // a whole number of bytes: the checksum bits are the top bits of the next byte.
    const std::size_t cs = nwords / 3;
    const std::size_t ent_bytes = (nbits - cs) / 8;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (EVP_Digest(bits.data(), ent_bytes, digest, &dlen, EVP_sha256(), nullptr) != 1 || dlen < 1)
        return false;
    return (digest[0] >> (8 - cs)) == (bits[ent_bytes] >> (8 - cs));
}

bool grafana_checksum_ok(std::string_view token) noexcept {
    // "gl" + service id + "_" + secret + "_" + checksum; the checksum covers everything
    // before its "_" and is written as the CRC's bytes least significant first.
    if (token.size() < 12 || token.substr(0, 2) != "gl" || token[token.size() - 9] != '_')
        return false;
    std::uint32_t got = 0;
    if (!parse_hex32(token.substr(token.size() - 8), false, true, got))
        return false;
    const std::uint32_t crc = crc32(token.substr(0, token.size() - 9));
    const std::uint32_t le =
        ((crc & 0xffU) << 24) | ((crc & 0xff00U) << 8) | ((crc >> 8) & 0xff00U) | (crc >> 24);
    return got == le;
}

bool cloudflare_checksum_ok(std::string_view token) noexcept {
    const auto us = token.find('_');
    if (us == std::string_view::npos)
        return false;
    const std::string_view prefix = token.substr(0, us);
    if (prefix != "cfk" && prefix != "cfut" && prefix != "cfat")
        return false;
    const std::string_view body = token.substr(us + 1);
    if (body.size() != 48)
        return false;
    std::uint32_t got = 0;
    if (!parse_hex32(body.substr(40), false, true, got))
        return false;
    // The prefix is not covered: only the 40 random characters are.
    return got == crc32(body.substr(0, 40));
}

bool atlassian_checksum_ok(std::string_view token) noexcept {
    if (token.size() < 16)
        return false;
    const std::string_view covered = token.substr(0, token.size() - 8);
    for (const char c : covered) {
        if (!is_alnum(c) && c != '-' && c != '_' && c != '=')
            return false;
    }
    std::uint32_t got = 0;
    if (!parse_hex32(token.substr(token.size() - 8), true, true, got))
        return false;
    return got == crc32(covered);
}

bool pem_body_ok(std::string_view block) noexcept {
    // Accepts a whole block ("-----BEGIN ...") or just the body that follows the BEGIN line.
    std::string_view body = block;
    if (const auto begin = block.find("-----BEGIN"); begin != std::string_view::npos) {
        const auto close = block.find("-----", begin + 10);
        if (close == std::string_view::npos)
            return false;
        body = block.substr(close + 5);
    }
    // Legacy OpenSSL encryption: the body is ciphertext after RFC 1421 headers; the
    // headers themselves are the evidence.
    if (body.find("Proc-Type:") != std::string_view::npos) {
        return body.find("ENCRYPTED") != std::string_view::npos;
    }
    // Skip armour headers ("Version: ...", "Comment: ...") of PGP blocks: the body starts
    // after the last line containing ": ".
    if (const auto colon = body.rfind(": "); colon != std::string_view::npos) {
        std::size_t i = colon;
        while (i < body.size() && body[i] != '\n' &&
               !(body[i] == '\\' && i + 1 < body.size() && body[i + 1] == 'n')) {
            ++i;
        }
        body = body.substr(i);
    }
    unsigned char der[24];
    const std::size_t n = b64_decode_prefix(body, der, sizeof der);
    if (n >= 15 && std::memcmp(der, "openssh-key-v1", 15) == 0)
        return true;
    // RFC 4880 4.2: packet tag 5 (secret key), old format 0x94..0x97 or new format 0xC5.
    if (n >= 4 && ((der[0] & 0xfc) == 0x94 || der[0] == 0xc5))
        return true;
    // DER: SEQUENCE tag then a definite length (short form or 1..3 length bytes).
    if (n < 4 || der[0] != 0x30)
        return false;
    if (der[1] < 0x80)
        return der[1] >= 2;
    const int len_bytes = der[1] & 0x7f;
    return len_bytes >= 1 && len_bytes <= 3;
}

bool jwt_header_ok(std::string_view token) noexcept {
    const auto dot = token.find('.');
    if (dot == std::string_view::npos || dot < 10)
        return false;
    unsigned char json[512];
    const std::string_view header = token.substr(0, dot);
    const std::size_t n = b64_decode_prefix(header, json, sizeof json);
    if (n < 8)
        return false;
    const std::string_view text(reinterpret_cast<const char*>(json), n);
    std::size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
        ++i;
    if (i >= text.size() || text[i] != '{')
        return false;
    return text.find("\"alg\"") != std::string_view::npos;
}

bool luhn_ok(std::string_view number) noexcept {
    int sum = 0;
    int digits = 0;
    bool dbl = false;
    for (auto it = number.rbegin(); it != number.rend(); ++it) {
        const char c = *it;
        if (c == ' ' || c == '-')
            continue;
        if (c < '0' || c > '9')
            return false;
        int d = c - '0';
        if (dbl) {
            d *= 2;
            if (d > 9)
                d -= 9;
        }
        sum += d;
        dbl = !dbl;
        ++digits;
    }
    return digits >= 12 && digits <= 19 && sum % 10 == 0;
}

bool iban_ok(std::string_view iban) noexcept {
    std::array<char, 40> compact{};
    std::size_t n = 0;
    for (const char c : iban) {
        if (c == ' ')
            continue;
        if (n == compact.size())
            return false;
        compact[n++] = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    if (n < 15 || n > 34)
        return false;
    if (!std::isupper(static_cast<unsigned char>(compact[0])) ||
        !std::isupper(static_cast<unsigned char>(compact[1]))) {
        return false;
    }
    unsigned rem = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const char c = compact[(k + 4) % n];
        if (c >= '0' && c <= '9') {
            rem = (rem * 10 + static_cast<unsigned>(c - '0')) % 97;
        } else if (c >= 'A' && c <= 'Z') {
            rem = (rem * 100 + static_cast<unsigned>(c - 'A' + 10)) % 97;
        } else {
            return false;
        }
    }
    return rem == 1;
}

double shannon_entropy(std::string_view s) noexcept {
    if (s.empty())
        return 0;
    std::array<std::size_t, 256> counts{};
    for (const char c : s)
        ++counts[static_cast<unsigned char>(c)];
    double h = 0;
    const double n = static_cast<double>(s.size());
    for (const std::size_t k : counts) {
        if (k == 0)
            continue;
        const double p = static_cast<double>(k) / n;
        h -= p * std::log2(p);
    }
    return h;
}

bool looks_like_placeholder(std::string_view s) noexcept {
    if (s.empty())
        return true;
    if (s.find("${") != std::string_view::npos || s.find("{{") != std::string_view::npos ||
        s.find("$(") != std::string_view::npos || s.front() == '<' || s.front() == '%' ||
        (s.front() == '$' && s.size() > 1 &&
         (std::isupper(static_cast<unsigned char>(s[1])) || s[1] == '_'))) {
        return true;
    }
    static constexpr std::string_view words[] = {
        "xxxx",        "changeme",    "change_me", "change-me", "example",  "your_",   "your-",
        "yourkey",     "placeholder", "redacted",  "dummy",     "sample",   "replace", "insert",
        "secret_here", "token_here",  "key_here",  "password",  "passw0rd", "foobar",  "todo",
        "****",        "....",        "test1234",  "abcdef12",  "12345678", "qwerty"};
    for (const auto w : words) {
        if (contains_icase(s, w))
            return true;
    }
    // One repeated character, or at most two distinct characters.
    std::array<bool, 256> seen{};
    int distinct = 0;
    for (const char c : s) {
        auto& b = seen[static_cast<unsigned char>(c)];
        if (!b) {
            b = true;
            ++distinct;
        }
    }
    return distinct <= 2;
}

bool is_known_validator(std::string_view name) noexcept {
    static constexpr std::string_view known[] = {
        "",        "github",     "npm",       "pem",         "jwt",
        "luhn",    "iban",       "entropy",   "placeholder", "bip39",
        "grafana", "cloudflare", "atlassian", "nonfiller",   "github_strict"};
    for (const auto k : known) {
        if (k == name)
            return true;
    }
    return false;
}

bool looks_like_filler(std::string_view token) noexcept {
    std::array<std::size_t, 256> counts{};
    std::size_t most = 0;
    for (const char c : token)
        most = std::max(most, ++counts[static_cast<unsigned char>(c)]);
    return !token.empty() && 2 * most >= token.size();
}

bool is_checksum_validator(std::string_view name) noexcept {
    return name == "github" || name == "npm" || name == "grafana" || name == "cloudflare" ||
           name == "atlassian";
}

bool validate(std::string_view name, std::string_view secret) noexcept {
    if (name.empty())
        return true;
    if (name == "github" || name == "npm")
        return github_checksum_ok(secret);
    if (name == "github_strict") {
        // A gate, not a confidence: the shapes it guards (a prefix in capitals, the 36
        // characters without their prefix) are only a token when the CRC32 verifies.
        // "_" + the 36 characters without their prefix, as github_checksum_ok reads them;
        // a token with every letter's case swapped (XOR 0x20) verifies swapped back.
        char buf[64];
        const bool bare = secret.size() == 36 && secret.find('_') == std::string_view::npos;
        const std::size_t n = secret.size() + (bare ? 1 : 0);
        if (n > sizeof buf)
            return false;
        buf[0] = '_';
        std::memcpy(buf + (bare ? 1 : 0), secret.data(), secret.size());
        if (github_checksum_ok(std::string_view(buf, n)))
            return true;
        for (std::size_t i = 0; i < n; ++i)
            if ((buf[i] >= 'a' && buf[i] <= 'z') || (buf[i] >= 'A' && buf[i] <= 'Z'))
                buf[i] = static_cast<char>(buf[i] ^ 0x20);
        return github_checksum_ok(std::string_view(buf, n));
    }
    if (name == "pem")
        return pem_body_ok(secret);
    if (name == "jwt")
        return jwt_header_ok(secret);
    if (name == "luhn")
        return luhn_ok(secret);
    if (name == "iban")
        return iban_ok(secret);
    if (name == "placeholder")
        return !looks_like_placeholder(secret);
    if (name == "nonfiller")
        return !looks_like_filler(secret);
    if (name == "bip39")
        return bip39_ok(secret);
    if (name == "grafana")
        return grafana_checksum_ok(secret);
    if (name == "cloudflare")
        return cloudflare_checksum_ok(secret);
    if (name == "atlassian")
        return atlassian_checksum_ok(secret);
    if (name == "entropy") {
        return secret.size() >= 8 && !looks_like_placeholder(secret) &&
               shannon_entropy(secret) >= 3.0;
    }
    return false;
}

} // namespace sluice::detectors
