#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/text.hpp"

#include <openssl/evp.h>

namespace sluice::detectors {

std::string fingerprint(std::string_view value) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    std::string out = "sha256:";
    if (EVP_Digest(value.data(), value.size(), digest, &len, EVP_sha256(), nullptr) != 1 ||
        len < 8) {
        // Unreachable with a working libcrypto; an obviously invalid value beats a throw.
        out.append(16, '0');
        return out;
    }
    text::append_hex(out, std::string_view(reinterpret_cast<const char*>(digest), 8));
    return out;
}

std::string key_material_fingerprint(std::string_view value) {
    // Separators are not key material: the private-key rules allow them between base64
    // groups, so the same key arrives with different ones depending on how it was pasted.
    std::string canon;
    canon.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
        const char c = value[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            continue;
        if (c == '\\' && i + 1 < value.size() && (value[i + 1] == 'n' || value[i + 1] == 'r')) {
            ++i;
            continue;
        }
        canon.push_back(c);
    }
    return fingerprint(canon);
}

} // namespace sluice::detectors
