#include "sluice/detectors/scanner.hpp"

#include "detail/ruleset_impl.hpp"
#include "detail/thread_scratch.hpp"
#include "sluice/detectors/stream_scanner.hpp"
#include "sluice/detectors/validators.hpp"

#include <algorithm>
#include <cstdint>

namespace sluice::detectors {

namespace detail {

struct hit {
    std::uint32_t rule;
    std::uint32_t pad; ///< 1 = a later hit of this rule ends one byte further: skip
    std::size_t end;
};

// A confirmed match before dedupe: `match_*` is the whole RE2 match, `secret_*` group 1.
struct candidate {
    std::uint32_t rule;
    std::size_t match_begin;
    std::size_t match_end;
    std::size_t secret_begin;
    std::size_t secret_end;
};

struct scanner_impl {
    std::shared_ptr<const ruleset> rules;
    // Reused across scans so the hot path allocates only when a scan has more hits than
    // any before it.
    std::vector<hit> hits;
    std::vector<candidate> candidates;
    std::vector<std::size_t> next_end; ///< per rule; SIZE_MAX when untouched
    std::size_t report_from = 0;
    std::size_t report_to = 0;
};

namespace {

int on_match(unsigned int id, unsigned long long /*from*/, unsigned long long to,
             unsigned int /*flags*/, void* ctx) {
    auto* self = static_cast<scanner_impl*>(ctx);
    if (to > self->report_from) {
        // Same rule, same end: Hyperscan may report a prefilter rule more than once.
        if (!self->hits.empty() && self->hits.back().rule == id && self->hits.back().end == to) {
            return 0;
        }
        self->hits.push_back(hit{id, 0, static_cast<std::size_t>(to)});
    }
    return 0;
}

} // namespace
} // namespace detail

scanner::scanner(std::shared_ptr<const ruleset> rules)
    : impl_(std::make_unique<detail::scanner_impl>()) {
    impl_->rules = std::move(rules);
    impl_->hits.reserve(256);
    impl_->candidates.reserve(64);
    impl_->next_end.assign(impl_->rules->rules().size(), SIZE_MAX);
}

scanner::~scanner() = default;
scanner::scanner(scanner&&) noexcept = default;
scanner& scanner::operator=(scanner&&) noexcept = default;

const ruleset& scanner::rules() const noexcept {
    return *impl_->rules;
}

bool scanner::scan(std::string_view data, std::vector<finding>& out) {
    return scan(data, 0, data.size(), out);
}

bool scanner::scan(std::string_view data, std::size_t report_from, std::size_t report_to,
                   std::vector<finding>& out) try {
    auto& s = *impl_;
    if (data.empty())
        return true;
    const auto& rs = s.rules->impl();
    // This thread's one scratch (thread_scratch.hpp); null only without memory, and then
    // the scan fails closed instead of throwing across this API.
    hs_scratch_t* scratch = detail::thread_scratch(rs.db.get(), rs.serial);
    if (!scratch)
        return false;
    s.hits.clear();
    s.candidates.clear();
    s.report_from = report_from;
    s.report_to = report_to;

    // Hyperscan takes an unsigned int length; larger inputs go in overlapping slices.
    constexpr std::size_t slice = std::size_t{1} << 30;
    const std::size_t overlap = rs.max_width;
    for (std::size_t base = 0; base < data.size();) {
        const std::size_t len = std::min(slice, data.size() - base);
        const std::size_t hits_before = s.hits.size();
        const std::size_t saved_from = s.report_from;
        const std::size_t saved_to = s.report_to;
        s.report_from = base == 0 ? saved_from : std::max(saved_from, base + overlap) - base;
        s.report_to = saved_to < base ? 0 : saved_to - base;
        const hs_error_t rc = hs_scan(rs.db.get(), data.data() + base, static_cast<unsigned>(len),
                                      0, scratch, detail::on_match, &s);
        s.report_from = saved_from;
        s.report_to = saved_to;
        if (rc != HS_SUCCESS)
            return false;
        for (std::size_t i = hits_before; i < s.hits.size(); ++i)
            s.hits[i].end += base;
        if (base + len == data.size())
            break;
        base += len - overlap;
    }
    if (s.hits.empty())
        return true;

    // A rule without a closing delimiter reports every end along a run of token bytes
    // (glc_... up to 400 characters gives ~370 hits). Only the last end of each
    // contiguous run needs RE2: the earlier ones are shorter matches that dedupe would
    // drop anyway. Without this an input crafted from such runs costs width x length.
    for (auto it = s.hits.rbegin(); it != s.hits.rend(); ++it) {
        std::size_t& next = s.next_end[it->rule];
        const bool inside_run = next == it->end + 1 && !rs.compiled[it->rule].prefilter;
        next = it->end;
        it->pad = inside_run ? 1 : 0;
    }
    for (const auto& h : s.hits) {
        s.next_end[h.rule] = SIZE_MAX;
    }

    re2::StringPiece groups[2];
    for (const auto& h : s.hits) {
        if (h.pad != 0) {
            continue; // inside a run: see above
        }
        const auto& c = rs.compiled[h.rule];
        // RE2 sees the buffer up to the hit end (so \b and ^ before the window evaluate
        // with real context) but starts no earlier than the rule's maximum width back.
        const std::size_t start = h.end > c.width ? h.end - c.width : 0;
        const re2::StringPiece text(data.data(), h.end);
        const int n = c.groups >= 1 ? 2 : 1;
        if (!c.confirm->Match(text, start, h.end, RE2::UNANCHORED, groups, n)) {
            continue;
        }
        const auto mb = static_cast<std::size_t>(groups[0].data() - data.data());
        const std::size_t me = mb + groups[0].size();
        std::size_t sb = mb, se = me;
        if (n == 2 && groups[1].data() != nullptr && !groups[1].empty()) {
            sb = static_cast<std::size_t>(groups[1].data() - data.data());
            se = sb + groups[1].size();
        }
        s.candidates.push_back(detail::candidate{h.rule, mb, me, sb, se});
    }
    if (s.candidates.empty()) {
        return true;
    }

    // Overlapping matches of one rule are one finding: the earliest-starting, longest
    // match (what a leftmost-longest regex search reports). Only that one is validated,
    // so a placeholder such as "changeme" cannot pass as its prefix "changem".
    std::sort(s.candidates.begin(), s.candidates.end(), [](const auto& a, const auto& b) {
        if (a.rule != b.rule) {
            return a.rule < b.rule;
        }
        if (a.match_begin != b.match_begin) {
            return a.match_begin < b.match_begin;
        }
        return a.match_end > b.match_end;
    });
    const std::size_t first_out = out.size();
    const detail::candidate* kept = nullptr;
    for (const auto& c : s.candidates) {
        if (kept != nullptr && kept->rule == c.rule && c.match_begin < kept->match_end) {
            continue;
        }
        kept = &c;
        // A match reaching past report_to may still grow with bytes not yet seen (stream
        // feeds): the caller rescans it later.
        if (c.match_end > report_to) {
            continue;
        }
        const rule& r = rs.rules[c.rule];
        const std::string_view secret = data.substr(c.secret_begin, c.secret_end - c.secret_begin);
        double confidence = r.confidence;
        if (!r.validator.empty() && !validate(r.validator, secret)) {
            // A prefixed, fixed-shape token is a token whatever its checksum: a hand-typed
            // or redacted-looking one still leaves the machine if we stay silent. Only
            // validators that are the sole thing separating a match from text gate it.
            if (!is_checksum_validator(r.validator) || looks_like_filler(secret)) {
                continue;
            }
            confidence = unverified_confidence(r.confidence);
        }
        finding f;
        f.rule_id = r.id;
        f.category = r.category;
        f.begin = c.secret_begin;
        f.end = c.secret_end;
        f.confidence = confidence;
        // Private keys are found multi-line, flattened or JSON-escaped; one key must keep
        // one fingerprint across those forms (dlp.ignore, audit correlation).
        f.fingerprint =
            r.category == "private-key" ? key_material_fingerprint(secret) : fingerprint(secret);
        out.push_back(std::move(f));
    }
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(first_out), out.end(),
              [](const finding& a, const finding& b) {
                  if (a.begin != b.begin)
                      return a.begin < b.begin;
                  if (a.end != b.end)
                      return a.end < b.end;
                  return a.rule_id < b.rule_id;
              });
    return true;
} catch (...) {
    // Only allocation can throw here; fail closed rather than cross the API with it.
    return false;
}

stream_scanner::stream_scanner(scanner& s)
    : scanner_(&s) {}

void stream_scanner::reset() noexcept {
    window_.clear();
    tail_len_ = 0;
    consumed_ = 0;
    recent_.clear();
}

bool stream_scanner::feed(std::string_view piece, std::vector<finding>& out) try {
    if (piece.empty())
        return true;
    const std::size_t keep = scanner_->rules().max_width();
    // window_ = carried tail + piece. Matches ending before the tail's end were reported by
    // the previous feed; one ending exactly there was held back and is decided now.
    window_.resize(tail_len_);
    window_.append(piece);
    const bool ok = scan_window(tail_len_ > 0 ? tail_len_ - 1 : 0, window_.size() - 1, out);
    consumed_ += piece.size();
    if (window_.size() > keep)
        window_.erase(0, window_.size() - keep);
    tail_len_ = window_.size();
    return ok;
} catch (...) {
    return false;
}

bool stream_scanner::finish(std::vector<finding>& out) try {
    if (tail_len_ == 0)
        return true;
    return scan_window(tail_len_ - 1, tail_len_, out);
} catch (...) {
    return false;
}

bool stream_scanner::scan_window(std::size_t from, std::size_t to, std::vector<finding>& out) {
    scratch_.clear();
    const bool ok = scanner_->scan(window_, from, to, scratch_);
    // Offsets in window_ are relative to the carried tail's first byte in the stream.
    const std::size_t window_base = consumed_ - tail_len_;
    // Forget reported findings that no longer reach into the window: nothing new can
    // overlap them.
    std::erase_if(recent_, [&](const recent& r) { return r.end <= window_base; });
    for (auto& f : scratch_) {
        f.begin += window_base;
        f.end += window_base;
        // A match that kept growing after it was reported (a rule without a closing
        // delimiter, e.g. a word list) comes back longer; it is the same secret.
        const bool repeat = std::any_of(recent_.begin(), recent_.end(), [&](const recent& r) {
            return r.rule_id == f.rule_id && f.begin < r.end && r.begin < f.end;
        });
        if (repeat) {
            continue;
        }
        recent_.push_back(recent{f.rule_id, f.begin, f.end});
        out.push_back(std::move(f));
    }
    return ok;
}

} // namespace sluice::detectors
