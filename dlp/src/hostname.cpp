// Host names as data (hostname.hpp). The views exist because a secret cut into labels
// ("ghp_abc.def.attacker.example") or encoded into them is whole again only once the
// labels around it are dropped and the dots removed; which labels those are is not known,
// so every run is tried. Base32 is decoded here because DNS names are case-insensitive:
// base64 does not survive a resolver, base32 and hex do, which is why tunnelling tools
// (iodine, dnscat2, DNSExfiltrator) use them.
#include "sluice/dlp/hostname.hpp"

#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/inspector.hpp"
#include "sluice/dlp/policy.hpp"

#include <libpsl.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace sluice::dlp {

namespace {

constexpr std::size_t min_base32_chars = 10;

// RFC 4648 section 6 (base32) and section 7 (base32hex) values, case-insensitive; -1 if
// the byte is outside the alphabet.
int base32_value(char c, bool hex_alphabet) noexcept {
    if (c >= 'a' && c <= 'z') {
        c = static_cast<char>(c - 'a' + 'A');
    }
    if (!hex_alphabet) {
        if (c >= 'A' && c <= 'Z') {
            return c - 'A';
        }
        return c >= '2' && c <= '7' ? c - '2' + 26 : -1;
    }
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    return c >= 'A' && c <= 'V' ? c - 'A' + 10 : -1;
}

// Unpadded base32 to bytes; false if any byte is outside the alphabet. Trailing bits
// that do not fill a byte are dropped, so a run cut short still yields its prefix.
bool base32_decode(std::string_view in, bool hex_alphabet, std::string& out) {
    out.clear();
    std::uint32_t acc = 0;
    int bits = 0;
    for (const char c : in) {
        const int v = base32_value(c, hex_alphabet);
        if (v < 0) {
            return false;
        }
        acc = (acc << 5) | static_cast<std::uint32_t>(v);
        bits += 5;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xffu));
        }
    }
    return !out.empty();
}

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

bool is_letter(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_vowel(char c) noexcept {
    switch (c | 0x20) {
    case 'a':
    case 'e':
    case 'i':
    case 'o':
    case 'u':
        return true;
    default:
        return false;
    }
}

// Registrable domain per the Public Suffix List, as an offset into `host`; npos when the
// host has none (it is a public suffix itself, or libpsl has no list).
std::size_t registrable_begin(std::string_view host) {
    const psl_ctx_t* psl = psl_builtin();
    if (psl == nullptr || host.empty()) {
        return std::string_view::npos;
    }
    const std::string z(host);
    const char* reg = psl_registrable_domain(psl, z.c_str());
    if (reg == nullptr) {
        return std::string_view::npos;
    }
    // libpsl returns a pointer into its argument.
    return static_cast<std::size_t>(reg - z.c_str());
}

} // namespace

std::vector<host_label> host_labels(std::string_view host) {
    std::vector<host_label> out;
    std::size_t at = 0;
    for (;;) {
        const auto dot = host.find('.', at);
        const std::size_t end = dot == std::string_view::npos ? host.size() : dot;
        out.push_back(host_label{at, end});
        if (dot == std::string_view::npos) {
            return out;
        }
        at = dot + 1;
    }
}

bool for_each_host_view(std::string_view host, const std::function<bool(const host_view&)>& each) {
    host_view v;
    v.bytes.assign(host);
    v.variant = "raw";
    v.origin.resize(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) {
        v.origin[i] = i;
    }
    v.run_begin = 0;
    v.run_end = host.size();
    if (!each(v)) {
        return false;
    }
    const auto labels = host_labels(host);
    host_view joined;
    host_view decoded;
    for (std::size_t first = 0; first < labels.size(); ++first) {
        joined.bytes.clear();
        joined.origin.clear();
        joined.variant = "labels";
        joined.run_begin = labels[first].begin;
        for (std::size_t last = first; last < labels.size(); ++last) {
            const auto& l = labels[last];
            for (std::size_t i = l.begin; i < l.end; ++i) {
                joined.bytes.push_back(host[i]);
                joined.origin.push_back(i);
            }
            joined.run_end = l.end;
            if (last == first && labels.size() > 1) {
                // One label alone: a decoder's candidate run stops at its edges.
                if (!each(joined)) {
                    return false;
                }
            } else if (last > first) {
                // The run with its dots: what a rule anchored on label boundaries sees
                // once the labels around it are gone.
                v.bytes.assign(host.substr(joined.run_begin, l.end - joined.run_begin));
                v.origin.resize(v.bytes.size());
                for (std::size_t i = 0; i < v.bytes.size(); ++i) {
                    v.origin[i] = joined.run_begin + i;
                }
                v.run_begin = joined.run_begin;
                v.run_end = l.end;
                if (!each(v) || !each(joined)) {
                    return false;
                }
            }
            if (joined.bytes.size() < min_base32_chars) {
                continue;
            }
            for (const bool hex_alphabet : {false, true}) {
                if (base32_decode(joined.bytes, hex_alphabet, decoded.bytes)) {
                    decoded.variant = hex_alphabet ? "labels>base32hex" : "labels>base32";
                    decoded.origin.clear();
                    decoded.run_begin = joined.run_begin;
                    decoded.run_end = joined.run_end;
                    if (!each(decoded)) {
                        return false;
                    }
                }
            }
        }
    }
    return true;
}

host_label host_range(const host_view& v, std::size_t offset, std::size_t length) noexcept {
    if (v.origin.empty() || v.origin.size() != v.bytes.size()) {
        return host_label{v.run_begin, v.run_end};
    }
    if (offset >= v.origin.size()) {
        return host_label{v.run_begin, v.run_end};
    }
    const std::size_t last = std::min(v.origin.size() - 1, offset + (length > 0 ? length - 1 : 0));
    return host_label{v.origin[offset], v.origin[last] + 1};
}

bool random_looking_label(std::string_view label, std::size_t min_length) noexcept {
    if (label.size() < min_length || label.empty()) {
        return false;
    }
    std::size_t digits = 0;
    std::size_t letters = 0;
    std::size_t vowels = 0;
    std::size_t switches = 0;
    int prev = 0; // 1 digit, 2 letter, 0 other
    for (const char c : label) {
        const int cls = is_digit(c) ? 1 : is_letter(c) ? 2 : 0;
        digits += cls == 1 ? 1 : 0;
        letters += cls == 2 ? 1 : 0;
        vowels += cls == 2 && is_vowel(c) ? 1 : 0;
        if (cls != 0 && prev != 0 && cls != prev) {
            ++switches;
        }
        prev = cls;
    }
    if (digits >= 2 && letters >= 2 && switches >= std::max<std::size_t>(3, label.size() / 6)) {
        return true;
    }
    // base32 with few digits: the switches are rare, the spread of letters is not.
    if (label.size() >= 16 && digits >= 1 && letters >= 8 && digits + letters == label.size() &&
        detectors::shannon_entropy(label) >= 4.0) {
        return true;
    }
    return letters >= 24 && letters == label.size() && 4 * vowels <= letters &&
           detectors::shannon_entropy(label) >= 3.8;
}

namespace {

// The hyphen-separated parts of a label worth scoring: words and a random part
// ("search-mydomain-<26 random>") are judged apart, so the words do not inflate the score.
constexpr std::size_t min_part = 6;

double label_score(std::string_view label) {
    double score = 0;
    std::size_t at = 0;
    while (at <= label.size()) {
        auto dash = label.find('-', at);
        if (dash == std::string_view::npos) {
            dash = label.size();
        }
        const auto part = label.substr(at, dash - at);
        if (random_looking_label(part, min_part)) {
            score += static_cast<double>(part.size()) * detectors::shannon_entropy(part) / 8;
        }
        at = dash + 1;
    }
    return score;
}

} // namespace

std::optional<hostname_exfil_hit> hostname_exfiltration(std::string_view host,
                                                        const hostname_exfil_settings& s) {
    if (!s.enabled || host.empty() || ip_address::parse(host).has_value()) {
        return std::nullopt;
    }
    for (const auto& pattern : s.allow) {
        if (host_matches(pattern, host)) {
            return std::nullopt;
        }
    }
    const std::size_t reg = registrable_begin(host);
    if (reg == std::string_view::npos || reg == 0) {
        return std::nullopt; // no subdomain labels to carry data
    }
    // A name counts once one label is random-looking at full length (min_label_length);
    // then shorter random-looking labels (the tail of the data, cut where a label filled)
    // add to its score too.
    const auto labels = host_labels(host.substr(0, reg - 1));
    const bool anchored = std::any_of(labels.begin(), labels.end(), [&](const host_label& l) {
        return random_looking_label(host.substr(l.begin, l.end - l.begin), s.min_label_length);
    });
    if (!anchored) {
        return std::nullopt;
    }
    hostname_exfil_hit hit;
    std::string carried;
    bool any = false;
    for (const auto& l : labels) {
        const auto label = host.substr(l.begin, l.end - l.begin);
        const double score = label_score(label);
        if (score == 0) {
            continue;
        }
        hit.score += score;
        hit.begin = any ? hit.begin : l.begin;
        hit.end = l.end;
        carried.append(label);
        any = true;
    }
    if (!any || hit.score < s.min_score) {
        return std::nullopt;
    }
    hit.fingerprint = detectors::fingerprint(carried);
    return hit;
}

std::string redact_host(std::string_view host, const std::vector<finding_record>& findings) {
    const auto labels = host_labels(host);
    std::vector<bool> redact(labels.size(), false);
    for (const auto& f : findings) {
        if (f.location != "host") {
            continue;
        }
        const std::size_t b = f.offset;
        const std::size_t e = f.offset + std::max<std::size_t>(f.length, 1);
        for (std::size_t i = 0; i < labels.size(); ++i) {
            // A label overlaps [b, e); an empty range at a dot still names its neighbour.
            if (labels[i].begin < e && b < std::max(labels[i].end, labels[i].begin + 1)) {
                redact[i] = true;
            }
        }
    }
    std::string out;
    out.reserve(host.size());
    for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) {
            out += '.';
        }
        if (redact[i]) {
            out += "[redacted]";
        } else {
            out.append(host.substr(labels[i].begin, labels[i].end - labels[i].begin));
        }
    }
    return out;
}

} // namespace sluice::dlp
