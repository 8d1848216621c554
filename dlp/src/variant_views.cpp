// The variant pipeline's entry points per location (variants.hpp): a whole buffer, a
// request target with its host, the leftovers of a content coding, compressed streams
// embedded in a body, and a body with its extracted values (URL, JSON, form, multipart,
// SSE), joined views and seams. Each builds the per-call state and runs the pipeline of
// variants.cpp (process) over what it extracted.
#include "sluice/dlp/variants.hpp"

#include "sluice/detectors/text.hpp"
#include "sluice/dlp/decode.hpp"
#include "sluice/dlp/git.hpp"
#include "sluice/dlp/seam.hpp"

#include "joined.hpp"
#include "variant_detail.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

namespace sluice::dlp {

namespace {

using text::lower;
using variant_detail::npos;

using spaces::trim;

// The names and values of `pairs` (a query or a form body: name=value&...), each
// percent-decoded with '+' as a space (WHATWG URL, application/x-www-form-urlencoded) and
// followed by '\n', appended to `out`; `piece` is scratch.
void form_lines(std::string_view pairs, std::string& piece, std::string& out) {
    std::size_t p = 0;
    while (p <= pairs.size()) {
        const std::size_t q = std::min(pairs.find('&', p), pairs.size());
        const std::string_view pair = pairs.substr(p, q - p);
        const std::size_t eq = pair.find('=');
        decode::percent(pair.substr(0, eq), piece, true);
        out += piece;
        out += '\n';
        if (eq != std::string_view::npos) {
            decode::percent(pair.substr(eq + 1), piece, true);
            out += piece;
            out += '\n';
        }
        p = q + 1;
    }
}

// A media-type parameter (boundary=...), quotes removed.
std::string param(std::string_view content_type, std::string_view name) {
    std::size_t pos = content_type.find(';');
    while (pos != std::string_view::npos) {
        const std::size_t next = content_type.find(';', pos + 1);
        std::string_view kv = trim(content_type.substr(pos + 1, next - pos - 1));
        const std::size_t eq = kv.find('=');
        if (eq != std::string_view::npos && lower(trim(kv.substr(0, eq))) == name) {
            std::string_view v = trim(kv.substr(eq + 1));
            if (v.size() >= 2 && v.front() == '"' && v.back() == '"')
                v = v.substr(1, v.size() - 2);
            return std::string(v);
        }
        pos = next;
    }
    return {};
}

} // namespace

variant_status variant_scanner::scan(std::string_view data, std::string_view location,
                                     std::vector<variant_finding>& out) {
    stats_.input_bytes += data.size();
    ctx c;
    c.location = location;
    c.out = &out;
    std::string chain;
    return process(data, chain, 0, 0, npos, c);
}

variant_status variant_scanner::scan_url(std::string_view target, std::string_view host,
                                         std::vector<variant_finding>& out) {
    stats_.input_bytes += target.size() + host.size();
    ctx c;
    c.location = "url";
    c.out = &out;
    std::string chain;
    auto st = process(target, chain, 0, 0, npos, c);
    if (st != variant_status::ok || !opts_.decoders)
        return st;

    const std::size_t qpos = target.find('?');
    const std::string_view path = target.substr(0, qpos);
    const std::string_view query =
        qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1);
    std::string buf;
    std::string piece;
    // Path segments, each percent-decoded, one per line.
    if (path.find('%') != std::string_view::npos) {
        std::size_t p = 0;
        while (p <= path.size()) {
            const std::size_t q = std::min(path.find('/', p), path.size());
            decode::percent(path.substr(p, q - p), piece);
            buf += piece;
            buf += '\n';
            p = q + 1;
        }
        if (!charge(buf.size()))
            return variant_status::over_budget;
        chain = "path";
        st = process(buf, chain, 0, 0, npos, c);
        if (st != variant_status::ok)
            return st;
    }
    // Query names and values, form-decoded ('+' is a space), one per line.
    if (query.find_first_of("%+") != std::string_view::npos) {
        buf.clear();
        form_lines(query, piece, buf);
        if (!charge(buf.size()))
            return variant_status::over_budget;
        chain = "query";
        st = process(buf, chain, 0, 0, npos, c);
        if (st != variant_status::ok)
            return st;
    }
    // Joined views: a secret cut over path segments or query values.
    for (const bool is_path : {true, false}) {
        joined::view v(is_path ? "path" : "query");
        if (is_path)
            joined::add_path(v, path);
        else
            joined::add_form(v, query);
        st = scan_joined(v, c);
        if (st != variant_status::ok)
            return st;
    }
    // Host labels joined: every run of consecutive labels, without the dots, one per line
    // (a key split across subdomain labels, whatever the registered domain is).
    std::vector<std::string_view> labels;
    for (std::size_t p = 0; p < host.size() && labels.size() < 16;) {
        const std::size_t q = std::min(host.find('.', p), host.size());
        labels.push_back(host.substr(p, q - p));
        p = q + 1;
    }
    if (labels.size() >= 3) {
        buf.clear();
        for (std::size_t a = 0; a + 1 < labels.size(); ++a) {
            std::string joined(labels[a]);
            for (std::size_t b = a + 1; b < labels.size(); ++b) {
                joined += labels[b];
                buf += joined;
                buf += '\n';
            }
        }
        if (!charge(buf.size()))
            return variant_status::over_budget;
        chain = "host";
        st = process(buf, chain, 0, 0, npos, c);
    }
    return st;
}

// Leftovers of a decoder (decode::leftovers): each scanned as "<chain>>leftover", then
// opened when it is itself compressed: the same coding again (a second brotli or DEFLATE
// stream after the first) and any gzip/zstd stream inside it, to a nesting of 3.
variant_status variant_scanner::scan_leftovers(const std::vector<std::string>& parts,
                                               std::string_view coding, const std::string& prefix,
                                               std::size_t nest, ctx& c) {
    std::string chain;
    std::string inflated;
    for (const auto& part : parts) {
        chain = prefix + ">leftover";
        auto st = process(part, chain, 0, 0, npos, c);
        if (st != variant_status::ok)
            return st;
        if (!opts_.decoders || nest >= 3)
            continue;
        const std::string base = chain;
        decode::leftovers sub;
        const auto rc = decode::content(coding, part, decode_room(), inflated, &sub);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        if (rc != decode::inflate_status::unknown && !inflated.empty()) {
            if (!charge(inflated.size()))
                return variant_status::over_budget;
            chain = base + ">" + lower(coding);
            st = process(inflated, chain, 1, 0, npos, c);
            if (st == variant_status::ok && !sub.empty())
                st = scan_leftovers(sub, coding, chain, nest + 1, c);
            if (st != variant_status::ok)
                return st;
        }
        st = scan_embedded(part, base, c, true);
        if (st != variant_status::ok)
            return st;
    }
    return variant_status::ok;
}

// The values of an inflated buffer that is JSON by shape (a tool call gzipped without a
// Content-Encoding), for its joined view; nothing for anything else.
static std::optional<joined::view> json_values(std::string_view text) {
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || (text[first] != '{' && text[first] != '['))
        return std::nullopt;
    std::optional<joined::view> v(std::in_place, "json");
    if (!joined::add_json(*v, text))
        return std::nullopt;
    return v;
}

// gzip members, zstd frames, bzip2, zlib, xz and lzma streams that start after other bytes
// ("junk" + gzip stream): decode::embedded_offsets finds them, and a false start fails
// within bytes.
variant_status variant_scanner::scan_embedded(std::string_view data, const std::string& prefix,
                                              ctx& c, bool leftover) {
    std::string inflated;
    std::string chain;
    // Every gzip, zstd, bzip2, zlib, xz or lzma start, each a candidate (a cap that skipped
    // the rest would let decoy magics hide the real stream after them).
    for (const std::size_t off : decode::embedded_offsets(data)) {
        if (off == 0 && !leftover)
            continue; // sniffed by the caller
        if (++stats_.candidates > opts_.budget.max_candidates)
            return variant_status::over_budget;
        std::string_view name;
        decode::leftovers left;
        bool cut = false;
        const auto rc =
            decode::sniffed(data.substr(off), decode_room(), inflated, name, &left, &cut);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        if (cut && !leftover && cut_end_ != 0)
            cuts_.push_back({off, std::string(name)}); // a stream of the body as it is
        if (inflated.empty() && left.empty())
            continue;
        if (!charge(inflated.size()))
            return variant_status::over_budget;
        // Offsets inside the inflated bytes are not the body's: nothing recorded there.
        const std::size_t body_end = cut_end_;
        cut_end_ = 0;
        chain = prefix;
        if (!chain.empty())
            chain += '>';
        if (!leftover)
            chain += "embedded>";
        chain += name;
        auto st = process(inflated, chain, 1, 0, npos, c);
        if (st == variant_status::ok && !left.empty())
            st = scan_leftovers(left, name, chain, 1, c);
        if (const auto v = json_values(inflated); st == variant_status::ok && v)
            st = scan_joined(*v, c);
        if (st != variant_status::ok)
            return st;
        cut_end_ = body_end;
    }
    return variant_status::ok;
}

// True when one of the values a joined finding spans holds a finding of its own where the
// join used it: the secret was that value's, already reported (or let through) on its own,
// and the join only glued a neighbour to it (a token followed by the next word is a longer
// look-alike). A part of a cut secret finds nothing alone, so real joins are kept.
bool variant_scanner::one_value_explains(std::string_view lines,
                                         const std::vector<joined::mark>& marks, std::size_t off,
                                         std::size_t len) {
    auto it = std::upper_bound(marks.begin(), marks.end(), off,
                               [](std::size_t o, const joined::mark& m) { return o < m.at; });
    if (it != marks.begin())
        --it;
    for (; it != marks.end() && it->at < off + len; ++it) {
        if (it->ordinal == joined::no_value)
            continue;
        const std::size_t end = std::next(it) != marks.end() ? std::next(it)->at : lines.size();
        const std::size_t lo = std::max(off, it->at) - it->at;
        const std::size_t hi = std::min(off + len, end) - it->at;
        scratch_.clear();
        if (!scanner_.scan(lines.substr(it->at, end - it->at), scratch_))
            return false;
        for (const auto& f : scratch_)
            if (f.begin < hi && f.end > lo)
                return true;
    }
    return false;
}

// The marks of a view's lines, written again (lines() leaves them out on the fast path;
// they are wanted only when a line found something). `size` checks it is the same buffer.
static std::vector<joined::mark> marks_of(const joined::view& v, std::size_t size,
                                          std::size_t split) {
    std::string again;
    std::vector<joined::mark> marks;
    std::size_t window_at = 0;
    if (!v.lines(again, &marks, window_at, split) || again.size() != size)
        marks.clear();
    return marks;
}

// Joined lines: the direct lines with every decoder (a base64 run cut over two fields is
// decoded whole), the window lines with the detectors only (they are the same values in
// other combinations, and decoding each of them again would multiply the decoders' work by
// the window). Findings' offsets are into `lines`.
variant_status variant_scanner::scan_lines(std::string_view lines, std::size_t window_at,
                                           std::string& chain, ctx& c) {
    auto st = process(lines.substr(0, window_at), chain, 0, 0, npos, c);
    if (st != variant_status::ok || window_at == lines.size())
        return st;
    const std::size_t from = c.out->size();
    st = scan_buffer(lines.substr(window_at), chain, 0, npos, c, nullptr);
    for (std::size_t i = from; i < c.out->size(); ++i)
        (*c.out)[i].offset += window_at;
    return st;
}

// A joined view's lines (joined.hpp), charged to the decode budget and scanned with every
// decoder; a finding that spans values is renamed "<view>:<ordinals>".
variant_status variant_scanner::scan_joined(const joined::view& v, ctx& c) {
    std::string buf;
    std::size_t window_at = 0;
    if (!opts_.joined || !v.lines(buf, nullptr, window_at))
        return variant_status::ok;
    if (!charge(buf.size()))
        return variant_status::over_budget;
    const std::size_t before = c.out->size();
    std::string chain = "joined:" + v.name();
    const std::size_t prefix = chain.size();
    const auto st = scan_lines(buf, window_at, chain, c);
    if (c.out->size() == before)
        return st;
    const std::vector<joined::mark> marks = marks_of(v, buf.size(), 0);
    std::size_t kept = before;
    for (std::size_t i = before; i < c.out->size(); ++i) {
        auto& f = (*c.out)[i];
        const std::string span = joined::name_span(marks, f.offset, f.length);
        if (!span.empty() && one_value_explains(buf, marks, f.offset, f.length))
            continue;
        if (!span.empty() && f.variant.starts_with("joined:"))
            f.variant =
                v.name() + ":" + span + f.variant.substr(std::min(prefix, f.variant.size()));
        if (kept != i)
            (*c.out)[kept] = std::move(f);
        ++kept;
    }
    c.out->resize(kept);
    return st;
}

variant_status variant_scanner::scan_seam(const message_ends& before, const message_ends& after,
                                          std::string_view location,
                                          std::vector<variant_finding>& out) {
    if (!opts_.joined || before.last.empty() || after.first.empty())
        return variant_status::ok;
    joined::view v("seam");
    for (const auto& s : before.last)
        v.add(s);
    for (const auto& s : after.first)
        v.add(s);
    // Only the lines that hold values from both messages: each side's own were scanned
    // with that message.
    const std::size_t split = before.last.size();
    std::string buf;
    std::size_t window_at = 0;
    if (!v.lines(buf, nullptr, window_at, split) || buf.empty())
        return variant_status::ok;
    if (!charge(buf.size()))
        return variant_status::over_budget;
    std::vector<variant_finding> found;
    ctx c;
    c.location = location;
    c.out = &found;
    std::string chain = "seam";
    const auto st = scan_lines(buf, window_at, chain, c);
    if (found.empty())
        return st;
    const std::vector<joined::mark> marks = marks_of(v, buf.size(), split);
    for (auto& f : found) {
        const auto ords = joined::span(marks, f.offset, f.length);
        if (ords.empty() || ords.front() >= split || ords.back() < split ||
            one_value_explains(buf, marks, f.offset, f.length))
            continue; // one side's own
        f.variant = "seam:" + joined::name_span(marks, f.offset, f.length) +
                    f.variant.substr(std::min<std::size_t>(4, f.variant.size()));
        out.push_back(std::move(f));
    }
    return st;
}

variant_status variant_scanner::scan_body(std::string_view body, std::string_view content_type,
                                          std::string_view content_encoding,
                                          std::vector<variant_finding>& out) {
    stats_.input_bytes += body.size();
    ends_ = {};
    cuts_.clear();
    cut_end_ = 0;
    ctx c;
    c.location = "body";
    c.out = &out;
    std::string chain;

    // Content-Encoding: codings are listed in the order applied; undo from the last. The
    // bytes as sent are scanned too: whatever a decoder skips (header fields, bytes after
    // the end of a stream) still reaches a detector.
    std::string decoded_body;
    std::string_view data = body;
    struct leftover {
        std::string bytes;
        std::string coding; // of the decoder that left them
        std::string chain;  // the decode chain up to that decoder
    };
    std::vector<leftover> pending;
    {
        std::vector<std::string_view> codings;
        std::size_t p = 0;
        while (p < content_encoding.size()) {
            const std::size_t q = std::min(content_encoding.find(',', p), content_encoding.size());
            const std::string_view cd = trim(content_encoding.substr(p, q - p));
            if (!cd.empty() && lower(cd) != "identity")
                codings.push_back(cd);
            p = q + 1;
        }
        std::string next;
        decode::leftovers left;
        for (auto it = codings.rbegin(); it != codings.rend(); ++it) {
            left.clear();
            const auto rc = decode::content(*it, data, decode_room(), next, &left);
            if (rc == decode::inflate_status::over_limit)
                return variant_status::over_budget;
            if (rc != decode::inflate_status::ok)
                return variant_status::bad_encoding;
            if (!charge(next.size()))
                return variant_status::over_budget;
            decoded_body.swap(next);
            data = decoded_body;
            if (!chain.empty())
                chain += '>';
            chain += lower(*it) == "x-gzip" ? "gzip" : lower(*it);
            for (auto& part : left)
                pending.push_back({std::move(part), std::string(*it), chain});
        }
    }
    const std::string prefix = chain;

    cut_end_ = data.size(); // cut streams are recorded in this pass only (cut_stream)
    auto st = process(data, chain, 0, 0, npos, c);
    cut_end_ = 0;
    const std::size_t body_end = data.size();
    // The decoded body first: a secret in both views is reported with its decode chain.
    if (st == variant_status::ok && data.data() != body.data()) {
        chain.clear();
        st = process(body, chain, 0, 0, npos, c);
    }
    for (const auto& p : pending) {
        if (st != variant_status::ok)
            break;
        st = scan_leftovers({p.bytes}, p.coding, p.chain, 0, c);
    }
    if (st != variant_status::ok || !opts_.decoders)
        return st;

    const std::string ct = lower(trim(content_type.substr(0, content_type.find(';'))));
    const auto step = [&](std::string_view name) {
        chain = prefix;
        if (!chain.empty())
            chain += '>';
        chain += name;
    };
    // Compressed bytes without (another) Content-Encoding, recognised by their magic: a
    // gzip/zlib/zstd file uploaded as is. A stream that breaks off is still scanned as
    // far as it decodes; a bomb is over budget like a declared one.
    {
        std::string inflated;
        std::string_view name;
        decode::leftovers left;
        bool cut = false;
        const auto rc = decode::sniffed(data, decode_room(), inflated, name, &left, &cut);
        if (rc == decode::inflate_status::over_limit)
            return variant_status::over_budget;
        // An .xz file (magic and header CRC32) that is corrupt is refused, as when
        // libarchive read it; one cut short is scanned as far as it decodes, like the others.
        if (rc == decode::inflate_status::error && !cut && name == "xz")
            return variant_status::bad_encoding;
        if (cut)
            cuts_.push_back({0, std::string(name)});
        if (rc != decode::inflate_status::unknown && !inflated.empty()) {
            if (!charge(inflated.size()))
                return variant_status::over_budget;
            step(name);
            st = process(inflated, chain, 1, 0, npos, c);
            if (const auto v = json_values(inflated); st == variant_status::ok && v)
                st = scan_joined(*v, c); // a split tool call, gzipped as it is
            if (st != variant_status::ok)
                return st;
        }
        if (rc != decode::inflate_status::unknown && !left.empty()) {
            step(name);
            st = scan_leftovers(left, name, chain, 0, c);
            if (st != variant_status::ok)
                return st;
        }
        // Not in a git push or pack: git.hpp reads every object (and refuses a pack with
        // bytes after it), and opening each object's zlib stream here as well would charge
        // the push twice to the decode budget.
        if (ct != variant_detail::receive_pack_type && !git::is_pack(data)) {
            cut_end_ = body_end; // the body's own streams, after other bytes
            st = scan_embedded(data, prefix, c, false);
            cut_end_ = 0;
        }
        if (st != variant_status::ok)
            return st;
    }
    if (st = scan_git(data, ct, c); st != variant_status::ok) // variant_git.cpp
        return st;
    if (!ct.starts_with("multipart/")) // parts are opened one by one below
        if (st = scan_archives(data, prefix, 0, 0, npos, c); st != variant_status::ok)
            return st; // variant_archive.cpp
    std::string buf;
    std::optional<joined::view> json_view; // parsed once, for this and the joined view
    if ((ct == "application/json" || (ct.size() > 5 && ct.ends_with("+json"))) &&
        (data.find("\\u") != std::string_view::npos ||
         data.find("\\/") != std::string_view::npos)) {
        // Only \u and \/ can change the characters a secret is made of; without them
        // every string is already in the raw pass (the rules read \n, \" and \\ as
        // separators). Keys and strings, unescaped, one per line.
        json_view.emplace("json");
        if (joined::add_json(*json_view, data, &buf)) {
            if (!charge(buf.size()))
                return variant_status::over_budget;
            step("json");
            st = process(buf, chain, 0, 0, npos, c);
        }
    } else if (ct == "application/x-www-form-urlencoded" &&
               data.find_first_of("%+") != std::string_view::npos) {
        std::string piece;
        form_lines(data, piece, buf);
        if (!charge(buf.size()))
            return variant_status::over_budget;
        step("form");
        st = process(buf, chain, 0, 0, npos, c);
    } else if (ct == "multipart/form-data" || ct == "multipart/mixed" ||
               ct == "multipart/related") {
        const std::string boundary = param(content_type, "boundary");
        if (!boundary.empty()) {
            joined::view parts("multipart");
            const std::string delim = "--" + boundary;
            std::size_t p = data.find(delim);
            std::string piece;
            while (p != std::string_view::npos && st == variant_status::ok) {
                std::size_t part = p + delim.size();
                if (data.substr(part, 2) == "--")
                    break;
                const std::size_t next = data.find(delim, part);
                std::string_view whole =
                    data.substr(part, (next == std::string_view::npos ? data.size() : next) - part);
                std::size_t hdr_end = whole.find("\r\n\r\n");
                std::size_t body_at = hdr_end + 4;
                if (hdr_end == std::string_view::npos) {
                    hdr_end = whole.find("\n\n");
                    body_at = hdr_end + 2;
                }
                if (hdr_end != std::string_view::npos) {
                    const std::string headers = lower(whole.substr(0, hdr_end));
                    std::string_view pbody = whole.substr(body_at);
                    while (!pbody.empty() && (pbody.back() == '\n' || pbody.back() == '\r'))
                        pbody.remove_suffix(1);
                    const std::size_t cte = headers.find("content-transfer-encoding:");
                    std::string_view value = pbody;
                    if (cte != std::string::npos) {
                        std::string_view val = std::string_view(headers).substr(cte + 26);
                        val = trim(val.substr(0, val.find('\n')));
                        bool ok = false;
                        std::string_view name;
                        if (val == "base64") {
                            ok = decode::base64(pbody, piece);
                            name = "multipart>base64";
                        } else if (val == "quoted-printable") {
                            ok = decode::quoted_printable(pbody, piece);
                            name = "multipart>qp";
                        }
                        if (ok) {
                            if (!charge(piece.size()))
                                return variant_status::over_budget;
                            step(name);
                            st = process(piece, chain, 0, 0, npos, c);
                            value = piece;
                        }
                    }
                    if (st == variant_status::ok)
                        st = scan_archives(value,
                                           prefix.empty() ? "multipart" : prefix + ">multipart", 0,
                                           0, npos, c);
                    parts.add(value);
                }
                p = next;
            }
            ends_ = joined::ends_from(parts);
            if (st == variant_status::ok)
                st = scan_joined(parts, c);
        }
    } else if (ct == "text/event-stream") {
        // Each event's data lines concatenated: a token split over two data: lines.
        const auto events = joined::sse_events(data);
        const bool any = !events.empty();
        for (const auto& e : events) {
            buf += e;
            buf += '\n';
        }
        if (any) {
            if (!charge(buf.size()))
                return variant_status::over_budget;
            step("sse");
            st = process(buf, chain, 0, 0, npos, c);
        }
    }
    if (st != variant_status::ok)
        return st;
    return scan_body_joined(data, ct, c, json_view ? &*json_view : nullptr);
}

// The joined views of a body's values (joined.hpp), by Content-Type or, for JSON, by shape:
// an agent does not have to say application/json for its tool call to be JSON.
variant_status variant_scanner::scan_body_joined(std::string_view data, std::string_view ct, ctx& c,
                                                 const joined::view* json) {
    if (ct.starts_with("multipart/"))
        return variant_status::ok; // joined part by part above
    const std::size_t first = data.find_first_not_of(" \t\r\n");
    const bool json_shape =
        first != std::string_view::npos && (data[first] == '{' || data[first] == '[');
    if (ct == "application/x-www-form-urlencoded") {
        joined::view v("form");
        joined::add_form(v, data);
        ends_ = joined::ends_from(v);
        return scan_joined(v, c);
    }
    if (ct == "text/event-stream") {
        joined::view v("sse");
        joined::add_sse(v, data);
        ends_ = joined::ends_from(v);
        return scan_joined(v, c);
    }
    if (json && json->size() > 0) {
        ends_ = joined::ends_from(*json);
        return scan_joined(*json, c);
    }
    if (json_shape || ct == "application/json" || (ct.size() > 5 && ct.ends_with("+json"))) {
        joined::view v("json");
        if (joined::add_json(v, data)) {
            ends_ = joined::ends_from(v);
            return scan_joined(v, c);
        }
    }
    ends_ = joined::ends_of_words(data);
    return variant_status::ok;
}

} // namespace sluice::dlp
