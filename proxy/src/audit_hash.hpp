// The audit chain's hash (audit_log.hpp "Format"): hex SHA-256 of a record's bytes, and
// the split of a line into the bytes it covers and its trailing "hash" member. Shared by
// the writer (audit_log.cpp) and the verifier (audit_verify.cpp). Thread safe.
#pragma once

#include "sluice/dlp/caller.hpp"

#include <string>
#include <string_view>

namespace sluice::proxy::detail {

// Hex SHA-256 of a record's bytes: the one the project already has (dlp/caller.hpp).
using dlp::sha256_hex;

// The hash member is always last, exactly `,"hash":"<64 hex>"}`: verification hashes the
// bytes before it plus the closing brace, so no JSON re-serialisation is involved.
inline constexpr std::string_view hash_key = ",\"hash\":\"";
inline constexpr std::size_t hash_suffix_len = hash_key.size() + 64 + 2; // + `"}`

inline bool split_hashed_line(std::string_view line, std::string& body, std::string& hash) {
    if (line.size() < hash_suffix_len + 2 || !line.ends_with("\"}"))
        return false;
    std::size_t at = line.size() - hash_suffix_len;
    if (line.substr(at, hash_key.size()) != hash_key)
        return false;
    hash.assign(line.substr(at + hash_key.size(), 64));
    for (char c : hash)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    body.assign(line.substr(0, at));
    body.push_back('}');
    return true;
}

} // namespace sluice::proxy::detail
