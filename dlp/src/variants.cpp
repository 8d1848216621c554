// The variant pipeline. The raw pass is one scanner call, exactly as without variants;
// everything else is driven by one cheap pass over the bytes with a 256-entry class
// table that finds candidate runs (base64/hex alphabet runs of 16+ bytes, and the
// regions around '%', '\\' and '&' escapes, and non-ASCII text). Only those runs are
// decoded, and binary-looking base64/hex output is dropped unless it is a gzip/zlib
// stream, so the cost on ordinary text stays a fraction of the raw scan. This file: the
// protected values, the scan of one depth's buffer, the depth loop and its budget, and
// compressed streams inside decoded bytes; the candidate pass is variant_candidates.cpp.
#include "sluice/dlp/variants.hpp"

#include "sluice/detectors/literal_set.hpp"
#include "sluice/detectors/text.hpp"
#include "sluice/detectors/validators.hpp"
#include "sluice/dlp/decode.hpp"
#include "sluice/dlp/seam.hpp"

#include "joined.hpp"
#include "variant_detail.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

namespace sluice::dlp {

using variant_detail::lossy;
using variant_detail::npos;
using variant_detail::raw_bound;
using variant_detail::tail_slack;

// ---------------------------------------------------------------------------------------
// protected values

struct protected_values::impl {
    std::shared_ptr<const detectors::literal_set> set; ///< null when no value is configured
    std::vector<std::size_t> lengths;
    std::vector<std::string> fingerprints;
};

protected_values::protected_values(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}
protected_values::~protected_values() = default;

std::expected<std::shared_ptr<const protected_values>, std::string>
protected_values::compile(const std::vector<std::string>& values) {
    auto p = std::make_unique<impl>();
    std::vector<std::string> literals;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const auto& v = values[i];
        if (v.empty())
            continue;
        if (v.size() < 4)
            return std::unexpected("protected value #" + std::to_string(i + 1) +
                                   " is shorter than 4 bytes");
        literals.push_back(v);
        p->lengths.push_back(v.size());
        p->fingerprints.push_back(detectors::fingerprint(v));
    }
    if (!literals.empty()) {
        // The literal set's message names no value.
        auto set = detectors::literal_set::compile(literals, {.first_only = true});
        if (!set)
            return std::unexpected("protected values: " + set.error());
        p->set = std::move(*set);
    }
    return std::shared_ptr<const protected_values>(new protected_values(std::move(p)));
}

// ---------------------------------------------------------------------------------------
// scanner

variant_scanner::variant_scanner(detectors::scanner& s, variant_options o)
    : scanner_(s)
    , opts_(std::move(o)) {}

variant_scanner::~variant_scanner() = default;

void variant_scanner::reset() noexcept {
    ends_ = {};
    stats_ = {};
    cuts_.clear();
}

namespace {

// Raw DEFLATE has no header: any bytes may start a stream, and some garbage decodes to a
// near copy of itself ("\x12\x12..." to the same bytes less one, the last few changed), as
// "%252525..." does under percent decoding: found in random hex and in random bytes' base64,
// such chains nested one level per byte until max_depth refused a clean body (413). A
// layer that decodes to nearly the bytes it came from does not count against max_depth:
// each is still decoded, charged to the decode budget (which bounds them: k levels of k
// bytes) and scanned, and max_levels bounds the number of levels.
constexpr std::size_t max_levels = 4096;

bool near_copy(std::size_t decoded, std::size_t src) noexcept {
    return decoded <= src && decoded + std::max<std::size_t>(src / 16, 4) >= src;
}

} // namespace

// Whether decoded buffers at `level` go deeper than max_depth allows (see max_levels).
bool variant_scanner::too_deep(const std::vector<segment>& segs, std::size_t level) const {
    return level > max_levels || std::any_of(segs.begin(), segs.end(), [&](const segment& sg) {
               return sg.counted > opts_.budget.max_depth;
           });
}

void variant_scanner::note_cut(std::size_t at, std::size_t end) {
    if (cut_end_ != 0 && end + tail_slack >= cut_end_)
        cuts_.push_back({at, {}});
}

std::size_t variant_scanner::decode_room() const noexcept {
    const auto& b = opts_.budget;
    std::size_t rel = npos;
    if (b.decoded_ratio == 0 || stats_.input_bytes <= (npos - b.decoded_floor) / b.decoded_ratio)
        rel = b.decoded_floor + b.decoded_ratio * stats_.input_bytes;
    const std::size_t cap = std::min(rel, b.max_decoded_bytes);
    return cap > stats_.decoded_bytes ? cap - stats_.decoded_bytes : 0;
}

bool variant_scanner::charge(std::size_t n) noexcept {
    if (n > decode_room())
        return false;
    stats_.decoded_bytes += n;
    return true;
}

variant_status variant_scanner::scan_buffer(std::string_view data, const std::string& chain,
                                            std::size_t outer_off, std::size_t outer_len, ctx& c,
                                            const std::vector<segment>* segs) {
    scratch_.clear();
    if (!scanner_.scan(data, scratch_))
        return variant_status::scanner_error;
    if (opts_.protect && opts_.protect->get().set) {
        const auto& pv = opts_.protect->get();
        const auto on_match = [&](unsigned id, std::size_t end) -> int {
            detectors::finding f;
            f.rule_id = "protected-value";
            f.category = "protected";
            f.end = end;
            f.begin = end - pv.lengths[id];
            f.confidence = 1.0;
            f.fingerprint = pv.fingerprints[id];
            scratch_.push_back(std::move(f));
            return 0;
        };
        if (!pv.set->scan(data, on_match))
            return variant_status::scanner_error;
    }
    for (auto& f : scratch_) {
        variant_finding v;
        v.location = std::string(c.location);
        if (segs) {
            // The segment holding the start of the match.
            auto it =
                std::upper_bound(segs->begin(), segs->end(), f.begin,
                                 [](std::size_t off, const segment& sg) { return off < sg.begin; });
            if (it == segs->begin())
                continue;
            --it;
            if (f.begin >= it->end)
                continue; // inside a separator
            f.begin -= it->begin;
            f.end -= it->begin;
            v.variant = it->chain;
            v.offset = it->outer_off;
            v.length = it->outer_len;
        } else if (outer_len == npos) {
            v.variant = chain.empty() ? "raw" : chain;
            v.offset = f.begin;
            v.length = f.end >= f.begin ? f.end - f.begin : 0;
        } else {
            v.variant = chain.empty() ? "raw" : chain;
            v.offset = outer_off;
            v.length = outer_len;
        }
        std::string key = f.rule_id;
        key += '\0';
        key += f.fingerprint;
        const auto [at, fresh] = c.seen.try_emplace(std::move(key), c.out->size());
        if (!fresh) {
            // Already reported through a shorter chain. The tar of a tar.gz is scanned as
            // text before its members are, and a pack's zlib streams are opened as embedded
            // streams before git reads them: the member's name or the blob's path says more
            // than "body". (A joined view drops and moves findings, so the index is checked.)
            const auto named = [](std::string_view l) {
                return l.starts_with("archive:") || l.starts_with("git:");
            };
            if (!named(c.location) || at->second >= c.out->size())
                continue;
            auto& first = (*c.out)[at->second];
            if (!named(first.location) && first.f.rule_id == f.rule_id &&
                first.f.fingerprint == f.fingerprint) {
                v.f = std::move(f);
                first = std::move(v);
            }
            continue;
        }
        v.f = std::move(f);
        c.out->push_back(std::move(v));
    }
    return variant_status::ok;
}

variant_status variant_scanner::process(std::string_view data, std::string& chain,
                                        std::size_t depth, std::size_t outer_off,
                                        std::size_t outer_len, ctx& c) {
    auto st = scan_buffer(data, chain, outer_off, outer_len, c, nullptr);
    if (st != variant_status::ok || !opts_.decoders)
        return st;
    c.next.clear();
    const bool top_tail = c.tail;
    const raw_bound top_bound = c.bound;
    const std::size_t top_counted = c.counted;
    c.counted = depth;
    // Offsets of the body itself are its bytes' own; a view's are its span's.
    c.bound = outer_len == npos ? raw_bound{0, 1, 1} : raw_bound{outer_off, 0, 1};
    st = candidates(data, chain, depth, outer_off, outer_len, c);
    level cur;
    std::string seg_chain;
    while (st == variant_status::ok && !c.next.segs.empty()) {
        // Something decodes once more than max_depth allows: it would go out unscanned,
        // so the depth is a budget like the others (over_budget, 413 decode_budget).
        if (depth >= opts_.budget.max_depth && too_deep(c.next.segs, depth + 1)) {
            st = variant_status::over_budget;
            break;
        }
        ++depth;
        std::swap(cur, c.next);
        c.next.clear();
        stats_.scanned_variants += cur.segs.size();
        st = scan_buffer(cur.buf, chain, 0, 0, c, &cur.segs);
        if (st != variant_status::ok)
            break;
        for (const auto& sg : cur.segs) {
            seg_chain = sg.chain;
            c.tail = sg.tail && top_tail;
            c.bound = sg.bound;
            c.counted = sg.counted;
            st = candidates(std::string_view(cur.buf).substr(sg.begin, sg.end - sg.begin),
                            seg_chain, depth, sg.outer_off, sg.outer_len, c);
            if (st != variant_status::ok)
                break;
        }
    }
    c.tail = top_tail;
    c.bound = top_bound;
    c.counted = top_counted;
    c.next.clear();
    return st;
}

// `from`, `src`: where the bytes `decoded` came from start in the buffer being walked
// (c.bound), and how many they are (at most; for a stream, the bytes after its start).
variant_status variant_scanner::try_decoded(std::string_view decoded, std::string_view step,
                                            std::string& chain, std::size_t depth, std::size_t off,
                                            std::size_t len, bool tail, std::size_t from,
                                            std::size_t src, ctx& c) {
    segment sg;
    sg.begin = c.next.buf.size();
    c.next.buf += decoded;
    sg.end = c.next.buf.size();
    c.next.buf += "\n \n";
    sg.chain = chain;
    if (!sg.chain.empty())
        sg.chain += '>';
    sg.chain += step;
    sg.outer_off = off;
    sg.outer_len = len;
    sg.tail = tail;
    sg.bound = c.bound.decoded(from, step);
    sg.counted = c.counted + (near_copy(decoded.size(), src) ? 0 : 1);
    c.next.segs.push_back(std::move(sg));
    return variant_status::ok;
}

// A decoded or inflated buffer that is itself compressed (gzip in gzip, zstd after junk
// inside an inflated stream, bzip2 in base64 in gzip): each stream is opened and goes to
// the next depth, so every layer counts against max_depth like base64 in base64, and a
// buffer still compressed past it is over budget. Bytes around the streams are in this
// depth's buffer and scanned with it. The body as sent is opened by scan_body.
variant_status variant_scanner::open_compressed(std::string_view data, std::string& chain,
                                                std::size_t depth, std::size_t outer_off,
                                                std::size_t outer_len, ctx& c) {
    std::string inflated;
    std::string_view name;
    const auto o = outer_len == npos ? std::size_t{0} : outer_off;
    const auto l = outer_len == npos ? data.size() : outer_len;
    const auto open = [&](std::size_t off) -> variant_status {
        bool cut = false;
        const auto rc =
            decode::sniffed(data.substr(off), decode_room(), inflated, name, nullptr, &cut);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        // Only a stream running into the end of bytes that run into the body's end was
        // cut by it (a window's end in body_stream); one that breaks off inside them
        // would break off in the whole body as well.
        if (cut && c.tail && outer_len != npos && !lossy(chain))
            note_cut(std::min(c.bound.at(off), o + l), o + l);
        if (rc == decode::inflate_status::unknown || inflated.empty())
            return variant_status::ok;
        if (!charge(inflated.size()))
            return variant_status::over_budget;
        return try_decoded(inflated, name, chain, depth, o, l, cut && c.tail, off,
                           data.size() - off, c);
    };
    auto st = open(0);
    // Every stream start, each a candidate: a cap that skipped the rest would let decoy
    // magics hide the stream after them.
    for (const std::size_t off : decode::embedded_offsets(data)) {
        if (st != variant_status::ok)
            break;
        if (off > 0)
            st = ++stats_.candidates <= opts_.budget.max_candidates ? open(off)
                                                                    : variant_status::over_budget;
    }
    if (st == variant_status::ok) // zip, tar, ... (variant_archive.cpp)
        st = scan_archives(data, chain, depth, o, outer_len == npos ? npos : l, c);
    return st;
}

} // namespace sluice::dlp
