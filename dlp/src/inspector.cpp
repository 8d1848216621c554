// The per-exchange inspector. Every path out of on_head/on_body is a verdict: an
// exception or a scanner failure becomes a deny, because forwarding bytes we could not
// scan is the one outcome an egress DLP must never produce.
#include "sluice/dlp/inspector.hpp"

#include "sluice/detectors/finding.hpp"

#include <algorithm>
#include <cctype>

namespace sluice::dlp {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

verdict internal_error() {
    verdict v;
    v.kind = verdict_kind::deny;
    v.status = 500;
    v.reason = "internal";
    return v;
}

} // namespace

inspector::inspector(const policy& p, detectors::scanner& s)
    : policy_(p)
    , scanner_(s) {
    // Fingerprint the exact ignore values once, so a finding (which carries only a range
    // and a fingerprint) is matched without keeping or comparing the plain value per scan.
    for (const auto& e : policy_.dlp.ignore) {
        if (!e.value.empty()) {
            ignore_fingerprints_.emplace_back(e.rule, detectors::fingerprint(e.value));
        }
        if (!e.fingerprint.empty()) {
            ignore_fingerprints_.emplace_back(e.rule, lower(e.fingerprint));
        }
    }
}

bool inspector::wanted(const detectors::finding& f) const noexcept {
    const auto& list = policy_.dlp.detectors;
    return std::any_of(list.begin(), list.end(), [&](const std::string& d) {
        return d == "all" || d == f.rule_id || d == f.category;
    });
}

bool inspector::ignored(const detectors::finding& f, std::string_view data) const {
    if (ignore_fingerprints_.empty()) {
        return false;
    }
    // Recompute from the scanned bytes instead of trusting f.fingerprint alone: the two
    // agree by construction, and this keeps the ignore list correct even if the scanner
    // ever reports a fingerprint of a normalised form of the secret.
    std::string fp = f.fingerprint;
    if (f.begin <= f.end && f.end <= data.size()) {
        fp = detectors::fingerprint(data.substr(f.begin, f.end - f.begin));
    }
    return std::any_of(
        ignore_fingerprints_.begin(), ignore_fingerprints_.end(), [&](const auto& e) {
            return e.first == f.rule_id && (e.second == fp || e.second == f.fingerprint);
        });
}

bool inspector::scan_into(std::string_view data, std::string_view location,
                          std::vector<finding_record>& out) {
    scratch_.clear();
    if (!scanner_.scan(data, scratch_)) {
        return false;
    }
    for (const auto& f : scratch_) {
        if (!wanted(f) || ignored(f, data)) {
            continue;
        }
        finding_record r;
        r.rule = f.rule_id;
        r.location = std::string(location);
        r.variant = "raw";
        r.offset = f.begin;
        r.length = f.end >= f.begin ? f.end - f.begin : 0;
        r.fingerprint = f.fingerprint;
        out.push_back(std::move(r));
    }
    return true;
}

verdict inspector::decide(std::vector<finding_record> findings) const {
    verdict v;
    if (findings.empty()) {
        return v;
    }
    v.findings = std::move(findings);
    switch (policy_.dlp.on_finding) {
    case finding_action::deny:
        v.kind = verdict_kind::deny;
        v.status = 403;
        v.reason = "dlp_finding";
        break;
    case finding_action::supervise:
        v.kind = verdict_kind::supervise;
        v.status = 403;
        v.reason = "dlp_finding";
        break;
    case finding_action::log:
        v.kind = verdict_kind::forward;
        v.status = 200;
        break;
    }
    return v;
}

verdict inspector::on_head(const request_view& req) {
    try {
        std::vector<finding_record> findings;
        if (!scan_into(req.target, "url", findings)) {
            return internal_error();
        }
        std::string location;
        for (const auto& h : req.headers) {
            if (iequals(h.name, "proxy-authorization")) {
                continue;
            }
            location.assign("header:");
            location += lower(h.name);
            if (!scan_into(h.value, location, findings)) {
                return internal_error();
            }
        }
        return decide(std::move(findings));
    } catch (...) {
        return internal_error();
    }
}

verdict inspector::on_body(std::string_view body) {
    try {
        if (body.size() > policy_.dlp.max_body) {
            verdict v;
            v.kind = verdict_kind::deny;
            v.status = 413;
            v.reason = "body_too_large";
            return v;
        }
        std::vector<finding_record> findings;
        if (!scan_into(body, "body", findings)) {
            return internal_error();
        }
        return decide(std::move(findings));
    } catch (...) {
        return internal_error();
    }
}

} // namespace sluice::dlp
