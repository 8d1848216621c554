#include "sluice/dlp/redact.hpp"

#include "sluice/dlp/hostname.hpp"
#include "sluice/dlp/inspector.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace sluice::dlp {

namespace {

// The ranges of `text` to replace; false when the whole text must go.
bool collect(std::string_view text, variant_scanner& vs,
             std::vector<std::pair<std::size_t, std::size_t>>& ranges) {
    std::vector<variant_finding> found;
    if (vs.scan(text, "redact", found) != variant_status::ok)
        return false;
    for (const auto& f : found) {
        // scan() reports decoded variants by the encoded run in `text` itself.
        if (f.offset >= text.size())
            return false;
        ranges.emplace_back(f.offset, std::min(f.length, text.size() - f.offset));
    }
    return true;
}

std::string replace(std::string_view text,
                    std::vector<std::pair<std::size_t, std::size_t>> ranges) {
    std::string out(text);
    // Right to left, merging overlaps, so earlier offsets stay valid.
    std::sort(ranges.begin(), ranges.end(), std::greater<>());
    std::size_t floor = out.size();
    for (auto [off, len] : ranges) {
        if (off >= floor)
            continue;
        len = std::min(len, floor - off);
        out.replace(off, len, redacted_marker);
        floor = off;
    }
    return out;
}

// Bytes a host name (or a run of its labels) is made of: LDH, '_' (seen in service names
// and in CONNECT targets a client made up) and the dots between labels.
bool host_byte(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

// The longest name a resolver takes (RFC 1035 section 2.3.4): the host views of one
// window of labels cost O(labels^2 x length), so longer runs are scanned in windows of
// at most this many bytes that overlap by half, and an encoded secret of up to half a
// window (a 40-byte token is 64 base32 characters) lies whole inside one of them.
constexpr std::size_t host_window = 253;

// Findings of the detectors in the host views of `host` (hostname.hpp: labels joined,
// base32/base32hex decoded, and the variant pipeline over each view), as "host"
// findings with offsets into `host`; false when a scan failed or went over budget.
bool host_findings(std::string_view host, variant_scanner& vs, std::vector<finding_record>& out) {
    std::vector<variant_finding> found;
    bool ok = true;
    for_each_host_view(host, [&](const host_view& view) {
        found.clear();
        if (vs.scan(view.bytes, "host", found) != variant_status::ok) {
            ok = false;
            return false;
        }
        for (const auto& f : found) {
            const auto range = host_range(view, f.offset, f.length);
            finding_record r;
            r.rule = f.f.rule_id;
            r.fingerprint = f.f.fingerprint;
            r.location = "host";
            r.offset = range.begin;
            r.length = range.end - range.begin;
            out.push_back(std::move(r));
        }
        return true;
    });
    return ok;
}

// A decoded secret is found in every run of labels that holds it (base32 decoding takes
// the labels after it along as trailing bytes): only the smallest run names its labels, as
// in inspector::on_destination.
void keep_smallest(std::vector<finding_record>& findings) {
    std::vector<finding_record> smallest;
    for (const auto& f : findings) {
        const bool wider = std::any_of(findings.begin(), findings.end(), [&](const auto& o) {
            return o.rule == f.rule && o.fingerprint == f.fingerprint && o.offset >= f.offset &&
                   o.offset + o.length <= f.offset + f.length && o.length < f.length;
        });
        if (!wider)
            smallest.push_back(f);
    }
    findings = std::move(smallest);
}

// Windows [begin, end) of `run` (host bytes with at least one dot), label-aligned, each at
// most host_window bytes (a single longer label is a window alone), the next starting at
// the first label at or past the middle of the previous one.
template <class OnWindow>
void host_windows(std::string_view run, OnWindow&& on_window) {
    const auto labels = host_labels(run);
    std::size_t i = 0;
    while (i < labels.size()) {
        std::size_t j = i + 1;
        while (j < labels.size() && labels[j].end - labels[i].begin <= host_window)
            ++j;
        on_window(labels[i].begin, labels[j - 1].end);
        if (j == labels.size())
            return;
        const std::size_t middle = labels[i].begin + (labels[j - 1].end - labels[i].begin) / 2;
        std::size_t next = i + 1;
        while (next < j - 1 && labels[next].begin < middle)
            ++next;
        i = next;
    }
}

// `text` with every host-name-shaped run (letters, digits, '-', '_' and at least one dot:
// a URL's authority, a CONNECT "host:port", a name in a message) whose host views hold a
// finding replaced by redact_host(): the labels that carried it become "[redacted]". A
// secret spelled into labels in an encoding only host views decode (base32 split over
// labels) is found nowhere else. False when a scan failed (the caller drops the text).
bool redact_hosts(std::string_view text, variant_scanner& vs, std::string& out) {
    out.clear();
    std::size_t i = 0;
    while (i < text.size()) {
        if (!host_byte(text[i])) {
            out += text[i++];
            continue;
        }
        std::size_t e = i;
        while (e < text.size() && host_byte(text[e]))
            ++e;
        const auto run = text.substr(i, e - i);
        std::vector<finding_record> findings;
        bool ok = true;
        if (run.find('.') != std::string_view::npos) {
            host_windows(run, [&](std::size_t b, std::size_t w_end) {
                if (!ok)
                    return;
                const auto first = findings.size();
                ok = host_findings(run.substr(b, w_end - b), vs, findings);
                for (auto k = first; k < findings.size(); ++k)
                    findings[k].offset += b;
            });
        }
        if (!ok)
            return false;
        keep_smallest(findings);
        out += findings.empty() ? std::string(run) : redact_host(run, findings);
        i = e;
    }
    return true;
}

} // namespace

std::string redact_secrets(std::string_view text, detectors::scanner& s, const variant_options& o) {
    if (text.empty())
        return {};
    variant_scanner vs(s, o);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    if (!collect(text, vs, ranges))
        return std::string(redacted_marker);
    std::string out = ranges.empty() ? std::string(text) : replace(text, std::move(ranges));
    // A secret cut by dots or slashes ("ghp_abc.def123.example") is whole again without
    // them. Offsets in that joined view do not map back, so a finding there (in what is
    // left after the ranges above) takes the whole text.
    std::string joined;
    for (char c : out)
        if (c != '.' && c != '/')
            joined += c;
    if (joined.size() != out.size()) {
        std::vector<variant_finding> found;
        if (vs.scan(joined, "redact", found) != variant_status::ok || !found.empty())
            return std::string(redacted_marker);
    }
    // Then the host names left in it: labels that carried a secret in an encoding only
    // host views decode (base32 over labels) are replaced label by label.
    std::string hosted;
    if (!redact_hosts(out, vs, hosted))
        return std::string(redacted_marker);
    return hosted;
}

} // namespace sluice::dlp
