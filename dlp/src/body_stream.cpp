// A streamed body: raw pieces scanned with a carried tail, compressed streams decoded
// across pieces, release held back until both views have scanned past a byte. Each scan
// uses a fresh inspector, so the variant budget is per piece as for a whole body.
#include "sluice/dlp/body_stream.hpp"

#include "sluice/dlp/decode.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace sluice::dlp {

namespace {

constexpr std::size_t slice = 16 * 1024; // raw bytes per decoder step (release granularity)
constexpr unsigned max_nesting = 3;      // streams inside decoded streams, below the body

std::string coding_name(std::string_view c) {
    std::string out;
    for (char ch : c)
        if (ch != ' ' && ch != '\t')
            out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out == "x-gzip" ? "gzip" : out;
}

verdict deny(int status, std::string reason) {
    verdict v;
    v.kind = verdict_kind::deny;
    v.status = status;
    v.reason = std::move(reason);
    return v;
}

} // namespace

struct body_stream::decoded_state {
    explicit decoded_state(std::string_view c)
        : dec(c)
        , coding(coding_name(c)) {}
    decode::stream_decoder dec;
    std::string coding; ///< variant prefix: gzip, deflate, br, zstd; zlib, bzip2, xz, lzma
                        ///< embedded
    bool declared = false;
    std::uint64_t raw_start = 0; ///< raw offset where the stream starts
    std::uint64_t raw_next = 0;  ///< raw offset of the next byte to feed
    std::uint64_t total = 0;     ///< decoded bytes produced (and scanned)
    /// The decoded bytes as a body of their own: scanned with a carried tail, and a
    /// stream inside them (gzip of a zlib stream) decoded across windows in turn.
    std::unique_ptr<body_stream> inner;
    std::uint64_t inner_released = 0; ///< decoded bytes `inner` has scanned with context
    std::uint64_t safe_raw = 0;       ///< raw bytes whose decoded bytes have full context
    std::deque<std::pair<std::uint64_t, std::uint64_t>> marks; ///< (raw end, total then)
};

bool body_stream::can_stream(std::string_view ce) noexcept {
    const std::string c = coding_name(ce);
    return c.empty() || c == "identity" || c == "gzip" || c == "deflate" || c == "br" ||
           c == "zstd";
}

body_stream::body_stream(const policy& p, detectors::scanner& s, variant_options o,
                         std::string_view content_encoding, std::size_t window, std::size_t overlap)
    : body_stream(p, s, std::move(o), content_encoding, window, overlap, nullptr) {}

body_stream::body_stream(const policy& p, detectors::scanner& s, variant_options o,
                         std::string_view content_encoding, std::size_t window, std::size_t overlap,
                         const body_stream* outer)
    : policy_(p)
    , scanner_(s)
    , opts_(std::move(o))
    , window_(std::max<std::size_t>(window, 2))
    , overlap_(std::min(overlap, window_ / 2))
    , root_(outer ? outer->root_ : this)
    , depth_(outer ? outer->depth_ + 1 : 0) {
    declared_ = coding_name(content_encoding);
    if (declared_ == "identity")
        declared_.clear();
}

body_stream::~body_stream() = default;

bool body_stream::scan(std::string_view bytes, std::uint64_t base, std::string_view coding,
                       result& r) {
    inspector ins(policy_, scanner_, opts_);
    verdict v = ins.on_body(bytes);
    cuts_ = ins.cut_streams();
    for (auto& cs : cuts_)
        cs.at += base;
    for (auto& f : v.findings) {
        f.offset += base;
        if (!coding.empty())
            f.variant = std::string(coding) + (f.variant == "raw" ? "" : ">" + f.variant);
        const bool seen = std::any_of(seen_.begin(), seen_.end(), [&](const auto& g) {
            return g.rule == f.rule && g.offset == f.offset && g.variant == f.variant;
        });
        if (!seen) {
            seen_.push_back(f);
            r.v.findings.push_back(std::move(f));
        }
    }
    if (v.kind == verdict_kind::forward)
        return true;
    r.v.kind = v.kind;
    r.v.status = v.status;
    r.v.reason = std::move(v.reason);
    return false;
}

// Decoded bytes go to the inner body_stream a window at a time; its findings are named
// with the coding in front (offsets are decoded offsets); its deny is this body's deny.
bool body_stream::scan_decoded(std::string_view fresh, bool last, result& r) {
    auto& d = *dec_;
    if (fresh.empty() && (!last || d.total == 0))
        return true; // nothing new (a false start that decoded nothing costs no scan)
    // Pieces the inner stream scans with its `overlap` bytes of context within a window.
    const std::size_t step = window_ - overlap_;
    for (std::size_t pos = 0; pos < fresh.size() || (last && pos == 0); pos += step) {
        const bool end = last && pos + step >= fresh.size();
        auto ir = d.inner->feed(fresh.substr(pos, step), end);
        for (auto& f : ir.v.findings) {
            f.variant = d.coding + (f.variant == "raw" ? "" : ">" + f.variant);
            const bool seen = std::any_of(seen_.begin(), seen_.end(), [&](const auto& g) {
                return g.rule == f.rule && g.offset == f.offset && g.variant == f.variant;
            });
            if (!seen) {
                seen_.push_back(f);
                r.v.findings.push_back(std::move(f));
            }
        }
        if (ir.v.kind != verdict_kind::forward) {
            r.v.kind = ir.v.kind;
            r.v.status = ir.v.status;
            r.v.reason = std::move(ir.v.reason);
            return false;
        }
        d.inner_released = ir.releasable;
        if (end)
            break;
    }
    return true;
}

// Feeds the raw bytes [raw_at, raw_at + raw.size()) not yet fed to the stream decoder,
// starting one where a declared coding says a stream begins, or where embedded_offsets()
// would see a gzip, zstd, bzip2, zlib, xz or lzma stream start.
bool body_stream::run_decoder(std::string_view raw, std::uint64_t raw_at, bool last, result& r) {
    const std::uint64_t raw_end = raw_at + raw.size();
    for (;;) {
        if (!dec_) {
            if (!declared_.empty() && raw_at == 0 && sniff_from_ == 0) {
                dec_ = std::make_unique<decoded_state>(declared_);
                dec_->declared = true;
                if (!dec_->dec.valid()) {
                    r.v = deny(400, "bad_encoding");
                    return false;
                }
            } else {
                if (depth_ >= max_nesting)
                    return true; // scanned (the inspector opens what fits a window), not sniffed
                const std::uint64_t from = std::max(sniff_from_, raw_at);
                if (from >= raw_end)
                    return true;
                // A start is decided on the embedded_probe bytes after it (a magic, or a
                // zlib header and the first bytes it inflates): those at the end of a piece
                // wait for the next one, in the carried tail, unless no more follow.
                const std::uint64_t settled =
                    last ? raw_end
                         : raw_end - std::min<std::uint64_t>(decode::embedded_probe, raw_end);
                if (from >= settled) {
                    sniff_from_ = from;
                    return true;
                }
                std::string_view coding;
                const std::size_t k =
                    decode::first_embedded(raw.substr(from - raw_at), settled - from, &coding);
                if (k == std::string_view::npos) {
                    sniff_from_ = settled;
                    return true;
                }
                const std::uint64_t start = from + k;
                dec_ = std::make_unique<decoded_state>(coding);
                dec_->raw_start = dec_->raw_next = dec_->safe_raw = start;
            }
            dec_->inner.reset(
                new body_stream(policy_, scanner_, opts_, {}, window_, overlap_, this));
            if (dec_->declared)
                sniff_from_ = 1; // the declared stream starts only once
        }
        auto& d = *dec_;
        bool dropped = false;
        while (d.raw_next < raw_end && !dropped) {
            const std::uint64_t off = std::max(d.raw_next, raw_at) - raw_at;
            const std::string_view part =
                raw.substr(off, std::min<std::size_t>(slice, raw.size() - off));
            const auto& b = opts_.budget;
            const std::uint64_t cap = b.decoded_floor + b.decoded_ratio * root_->fed_;
            const std::size_t room = cap > d.total ? static_cast<std::size_t>(cap - d.total) : 0;
            std::string out;
            const auto rc = d.dec.feed(part, room, out);
            d.raw_next = raw_at + off + part.size();
            d.total += out.size();
            if (!scan_decoded(out, false, r))
                return false;
            d.marks.emplace_back(d.raw_next, d.total);
            while (!d.marks.empty() && d.marks.front().second <= d.inner_released) {
                d.safe_raw = d.marks.front().first;
                d.marks.pop_front();
            }
            if (rc == decode::inflate_status::over_limit) {
                r.v = deny(413, "decode_budget");
                return false;
            }
            if (rc != decode::inflate_status::ok) {
                if (d.declared) {
                    r.v = deny(400, "bad_encoding");
                    return false;
                }
                // Not a stream after all (or it breaks off): scanned as far as it decoded;
                // the magic search goes on after its first byte.
                sniff_from_ = d.raw_start + 1;
                dropped = true;
            } else if (d.dec.ended()) {
                sniff_from_ = d.raw_start + d.dec.consumed();
                dropped = true;
            }
        }
        if (!dropped) {
            if (last && !scan_decoded({}, true, r))
                return false;
            if (last && d.declared && d.dec.finish() != decode::inflate_status::ok) {
                r.v = deny(400, "bad_encoding");
                return false;
            }
            return true;
        }
        if (!scan_decoded({}, true, r)) // the end of the decoded bytes: the inner stream's last
            return false;
        dec_.reset();
    }
}

std::uint64_t body_stream::rescan_from(std::uint64_t scan_at,
                                       std::uint64_t scanned_end) const noexcept {
    constexpr std::uint64_t none = std::numeric_limits<std::uint64_t>::max();
    std::uint64_t from = scanned_end - std::min<std::uint64_t>(overlap_, scanned_end);
    for (const auto& cs : cuts_) {
        if (cs.at + overlap_ >= scanned_end)
            continue; // scanned again, with more of it, in front of the next piece
        if (!cs.outer.empty() && depth_ < max_nesting) {
            // The stream the decoder follows, or one whose bytes lie inside that stream's
            // compressed bytes (copied whole in a stored block: the decoded bytes, which
            // the inner body_stream inspects, carry them too).
            if (dec_ && cs.at >= dec_->raw_start)
                continue;
            // Not yet searched for (its start waits for the bytes after it).
            if (!dec_ && cs.at >= sniff_from_ && cs.outer != "raw-deflate")
                continue;
        }
        // Scanned again from its start, once: a stream cut again from where its scan began
        // runs past a window.
        if (cs.at <= scan_at || cs.at + window_ < scanned_end)
            return none;
        from = std::min(from, cs.at);
    }
    return from;
}

body_stream::result body_stream::feed(std::string_view data, bool last) {
    result r;
    r.releasable = released_; // a deny releases nothing more
    try {
        const std::uint64_t at = fed_;
        fed_ += data.size();
        std::string buf = raw_tail_;
        buf += data;
        const std::uint64_t buf_at = at - raw_tail_.size();
        // Scanned again: the last `overlap` bytes of the tail (the rest only waits for the
        // stream search), so a piece and its context stay within the window; all of it
        // when it was kept for a cut stream's start.
        const std::size_t skip = rescan_ ? static_cast<std::size_t>(rescan_at_ - buf_at)
                                         : raw_tail_.size() - std::min(overlap_, raw_tail_.size());
        if (!scan(std::string_view(buf).substr(skip), buf_at + skip, {}, r))
            return r;
        if (!run_decoder(buf, buf_at, last, r))
            return r;
        // Cut short by this piece's end and followed by nothing: the rest would go out
        // undecoded. At the end of the body a cut stream is what the whole-body rules say.
        const std::uint64_t end = buf_at + buf.size();
        const std::uint64_t from = last ? end : rescan_from(buf_at + skip, end);
        if (from == std::numeric_limits<std::uint64_t>::max()) {
            r.v = deny(413, "decode_budget");
            return r;
        }
        // The tail is also where an embedded stream's start cut by this piece is found.
        rescan_ = from + overlap_ < end;
        rescan_at_ = from;
        std::size_t keep = std::min(std::max(overlap_, decode::embedded_probe), buf.size());
        if (rescan_)
            keep = std::max(keep, static_cast<std::size_t>(end - from));
        raw_tail_.assign(buf, buf.size() - keep, keep);
        std::uint64_t rel =
            last ? fed_ : std::min(from, fed_ - std::min<std::uint64_t>(overlap_, fed_));
        if (dec_ && !last)
            rel = std::min(rel, dec_->safe_raw);
        released_ = std::max(released_, rel);
        r.releasable = released_;
    } catch (...) {
        r.v = deny(500, "internal");
        r.releasable = released_;
    }
    return r;
}

} // namespace sluice::dlp
