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
    : inspector(p, s, variant_options{}) {}

inspector::inspector(const policy& p, detectors::scanner& s, variant_options o)
    : policy_(p)
    , scanner_(s)
    , variants_(s, std::move(o)) {
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
    if (f.category == "protected") {
        return true; // an operator's own protected values apply whatever the detector list
    }
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

bool inspector::take(variant_status st, std::vector<variant_finding>& found,
                     std::vector<finding_record>& out, verdict& failed) const {
    switch (st) {
    case variant_status::ok:
        break;
    case variant_status::over_budget:
        failed.kind = verdict_kind::deny;
        failed.status = 413;
        failed.reason = "decode_budget";
        return false;
    case variant_status::bad_encoding:
        failed.kind = verdict_kind::deny;
        failed.status = 400;
        failed.reason = "bad_encoding";
        return false;
    case variant_status::scanner_error:
        failed = internal_error();
        return false;
    }
    for (auto& v : found) {
        // A decoded variant's bytes are gone by now; its fingerprint is of the decoded
        // secret, which is what the ignore list holds.
        if (!wanted(v.f) || ignored(v.f, {})) {
            continue;
        }
        finding_record r;
        r.rule = std::move(v.f.rule_id);
        r.location = std::move(v.location);
        r.variant = std::move(v.variant);
        r.offset = v.offset;
        r.length = v.length;
        r.fingerprint = std::move(v.f.fingerprint);
        out.push_back(std::move(r));
    }
    found.clear();
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
        std::vector<variant_finding> found;
        verdict failed;
        variants_.reset();
        content_type_.clear();
        content_encoding_.clear();
        if (!take(variants_.scan_url(req.target, req.host, found), found, findings, failed)) {
            return failed;
        }
        std::string location;
        for (const auto& h : req.headers) {
            if (iequals(h.name, "proxy-authorization")) {
                continue;
            }
            if (iequals(h.name, "content-type")) {
                content_type_.assign(h.value);
            } else if (iequals(h.name, "content-encoding")) {
                if (!content_encoding_.empty()) {
                    content_encoding_ += ", ";
                }
                content_encoding_ += h.value;
            }
            location.assign("header:");
            location += lower(h.name);
            if (!take(variants_.scan(h.value, location, found), found, findings, failed)) {
                return failed;
            }
        }
        return decide(std::move(findings));
    } catch (...) {
        return internal_error();
    }
}

verdict inspector::on_destination(std::string_view host) {
    try {
        std::vector<finding_record> findings;
        std::vector<variant_finding> found;
        verdict failed;
        variants_.reset();
        if (!take(variants_.scan(host, "host", found), found, findings, failed)) {
            return failed;
        }
        // A secret cut into labels ("ghp_abc.def123.attacker.example") is whole again
        // without the dots.
        std::string joined;
        joined.reserve(host.size());
        for (char ch : host) {
            if (ch != '.') {
                joined += ch;
            }
        }
        if (joined.size() != host.size() &&
            !take(variants_.scan(joined, "host", found), found, findings, failed)) {
            return failed;
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
        std::vector<variant_finding> found;
        verdict failed;
        if (!take(variants_.scan_body(body, content_type_, content_encoding_, found), found,
                  findings, failed)) {
            return failed;
        }
        return decide(std::move(findings));
    } catch (...) {
        return internal_error();
    }
}

} // namespace sluice::dlp
