#include "sluice/dlp/redact.hpp"

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
    return out;
}

} // namespace sluice::dlp
