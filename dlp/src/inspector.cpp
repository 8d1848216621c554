// The per-exchange inspector. Every path out of on_head/on_body is a verdict: an
// exception or a scanner failure becomes a deny, because forwarding bytes we could not
// scan is the one outcome an egress DLP must never produce.
#include "sluice/dlp/inspector.hpp"

#include "sluice/detectors/text.hpp"

#include "sluice/detectors/finding.hpp"
#include "sluice/dlp/hostname.hpp"

#include <algorithm>
#include <cctype>

namespace sluice::dlp {

namespace {

using text::iequals;
using text::lower;

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
        // Every byte of the head is sent upstream, so the method and the field names are
        // scanned too (one line each), not only the target and the field values.
        std::string names(req.method);
        for (const auto& h : req.headers) {
            names += '\n';
            names += h.name;
        }
        if (!take(variants_.scan(names, "head", found), found, findings, failed)) {
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
        std::vector<finding_record> in_view;
        std::vector<variant_finding> found;
        verdict failed;
        bool ok = true;
        variants_.reset();
        for_each_host_view(host, [&](const host_view& view) {
            in_view.clear();
            if (!take(variants_.scan(view.bytes, "host", found), found, in_view, failed)) {
                ok = false;
                return false;
            }
            for (auto& r : in_view) {
                add_host_finding(view, std::move(r), findings);
            }
            return true;
        });
        if (!ok) {
            return failed;
        }
        // A decoded secret is found in every run that contains its labels (and a decoder
        // may take the labels after it along); the smallest run is where it is.
        std::vector<finding_record> smallest;
        for (const auto& f : findings) {
            const bool wider = std::any_of(findings.begin(), findings.end(), [&](const auto& o) {
                return o.rule == f.rule && o.fingerprint == f.fingerprint && o.offset >= f.offset &&
                       o.offset + o.length <= f.offset + f.length && o.length < f.length;
            });
            if (!wider) {
                smallest.push_back(f);
            }
        }
        findings = std::move(smallest);
        if (auto hit = hostname_exfiltration(host, policy_.dlp.hostname_exfil)) {
            const bool ignore = std::any_of(
                ignore_fingerprints_.begin(), ignore_fingerprints_.end(), [&](const auto& e) {
                    return e.first == hostname_exfil_rule && e.second == hit->fingerprint;
                });
            if (!ignore) {
                finding_record r;
                r.rule = hostname_exfil_rule;
                r.location = "host";
                r.variant = "raw";
                r.offset = hit->begin;
                r.length = hit->end - hit->begin;
                r.fingerprint = std::move(hit->fingerprint);
                findings.push_back(std::move(r));
            }
        }
        return decide(std::move(findings));
    } catch (...) {
        return internal_error();
    }
}

void inspector::add_host_finding(const host_view& view, finding_record r,
                                 std::vector<finding_record>& out) {
    // Offsets come back relative to the view; the audit redacts labels of the host.
    const auto range = host_range(view, r.offset, r.length);
    r.offset = range.begin;
    r.length = range.end - range.begin;
    if (view.variant != "raw") {
        r.variant = r.variant == "raw" ? view.variant : view.variant + ">" + r.variant;
    }
    // Overlapping runs find one secret many times: keep the first report of each.
    const bool seen = std::any_of(out.begin(), out.end(), [&](const finding_record& o) {
        return o.rule == r.rule && o.fingerprint == r.fingerprint && o.offset == r.offset &&
               o.length == r.length;
    });
    if (!seen) {
        out.push_back(std::move(r));
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

verdict inspector::on_seam(const message_ends& before, const message_ends& after,
                           std::string_view location) {
    try {
        std::vector<finding_record> findings;
        std::vector<variant_finding> found;
        verdict failed;
        if (!take(variants_.scan_seam(before, after, location, found), found, findings, failed)) {
            return failed;
        }
        return decide(std::move(findings));
    } catch (...) {
        return internal_error();
    }
}

} // namespace sluice::dlp
