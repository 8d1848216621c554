// A policy's `dlp` section: detectors, on_finding, body limits, ignore entries and
// hostname_exfil (dlp/inspector.hpp, dlp/hostname.hpp).
#include "loader.hpp"

#include "sluice/detectors/text.hpp"

#include <charconv>
#include <system_error>
#include <utility>

namespace sluice::config {

// `dlp.hostname_exfil: {enabled, min_score, min_label_length, allow}` (hostname.hpp).
void loader::hostname_exfil_section(const YAML::Node& n, dlp::hostname_exfil_settings& h) {
    auto m =
        w_.map(n, "hostname_exfil", {"enabled", "min_score", "min_label_length", "allow"}, true);
    if (!m) {
        return;
    }
    if (auto* e = m->get("enabled")) {
        if (auto b = w_.boolean(*e, "hostname_exfil enabled")) {
            h.enabled = *b;
        }
    }
    if (auto* ms = m->get("min_score")) {
        if (auto v = w_.str(*ms, "min_score")) {
            double score = 0;
            const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), score);
            if (ec != std::errc() || end != v->data() + v->size() || !(score > 0) || score > 1000) {
                w_.error(*ms, "invalid min_score " + walker::shown(*ms) +
                                  " (expected a number of bytes above 0, at most 1000)");
            } else {
                h.min_score = score;
            }
        }
    }
    if (auto* ml = m->get("min_label_length")) {
        if (auto v = w_.u64(*ml, "min_label_length", 63)) {
            if (*v < 8) {
                w_.error(*ml, "invalid min_label_length " + walker::shown(*ml) +
                                  " (expected 8..63: a DNS label is at most 63 bytes)");
            } else {
                h.min_label_length = static_cast<std::size_t>(*v);
            }
        }
    }
    if (auto* al = m->get("allow")) {
        w_.seq(*al, "hostname_exfil allow", [&](const YAML::Node& e) {
            if (auto p = host_pattern(e, "hostname_exfil allow")) {
                h.allow.push_back(*p);
            }
        });
    }
}

void loader::dlp_section(const YAML::Node& n, dlp::dlp_settings& d) {
    auto m = w_.map(
        n, "dlp",
        {"detectors", "on_finding", "max_body", "large_bodies", "ignore", "hostname_exfil"}, true);
    if (!m) {
        return;
    }
    if (auto* det = m->get("detectors")) {
        d.detectors.clear();
        w_.seq(*det, "detectors", [&](const YAML::Node& e) {
            if (auto s = w_.str(e, "detector")) {
                d.detectors.push_back(*s);
                detector_refs_.push_back({*s, e.Mark(), "detector"});
            }
        });
        if (det->IsSequence() && det->size() == 0) {
            w_.error(*det, "detectors is empty: use [all] or list rule ids or categories");
        }
    }
    if (auto* of = m->get("on_finding")) {
        if (auto s = w_.one_of(*of, "on_finding", {"deny", "supervise", "log"})) {
            d.on_finding = *s == "deny"        ? dlp::finding_action::deny
                           : *s == "supervise" ? dlp::finding_action::supervise
                                               : dlp::finding_action::log;
        }
    }
    if (auto* mb = m->get("max_body")) {
        if (auto v = w_.size(*mb, "max_body")) {
            d.max_body = *v;
        }
    }
    if (auto* lb = m->get("large_bodies")) {
        if (auto s = w_.one_of(*lb, "large_bodies", {"deny", "stream"})) {
            d.stream_large_bodies = *s == "stream";
        }
    }
    if (auto* hx = m->get("hostname_exfil")) {
        hostname_exfil_section(*hx, d.hostname_exfil);
    }
    if (auto* ig = m->get("ignore")) {
        w_.seq(*ig, "ignore", [&](const YAML::Node& e) { ignore_entry(e, d); });
    }
}

// One `dlp.ignore` entry: a known rule id and exactly one of `value` or `fingerprint`.
void loader::ignore_entry(const YAML::Node& e, dlp::dlp_settings& d) {
    auto im = w_.map(e, "an ignore entry", {"rule", "value", "fingerprint"});
    if (!im) {
        return;
    }
    dlp::ignore_entry entry;
    if (auto* r = im->get("rule")) {
        if (auto s = w_.str(*r, "ignore rule")) {
            entry.rule = *s;
            rule_refs_.push_back({*s, r->Mark(), "ignore rule"});
        }
    } else {
        w_.error(im->mark, "ignore entry needs a 'rule'");
    }
    auto* v = im->get("value");
    auto* f = im->get("fingerprint");
    if ((v != nullptr) == (f != nullptr)) {
        w_.error(im->mark, "ignore entry needs exactly one of 'value' or 'fingerprint'");
    }
    if (v) {
        if (auto s = w_.str(*v, "ignore value")) {
            entry.value = *s;
        }
    }
    if (f) {
        if (auto s = w_.str(*f, "ignore fingerprint")) {
            std::string fp = text::lower(*s);
            if (!fp.starts_with("sha256:") || fp.size() != 7 + 16 || !is_hex(fp.substr(7))) {
                w_.error(*f, "ignore fingerprint must be 'sha256:' followed by 16 hex digits");
            } else {
                entry.fingerprint = fp;
            }
        }
    }
    d.ignore.push_back(std::move(entry));
}

} // namespace sluice::config
