// Archives through the variant pipeline (variants.hpp, issue 21): a body, a multipart part
// or a decoded buffer that is a zip, tar, 7z, ... (archive.hpp) has each member go through
// process() under a location of its own, at the next depth, so a key in a file of an npm
// tarball or of a zip inside a multipart upload is found like one in a JSON body, and an
// archive inside an archive is opened in turn until max_depth.
#include "sluice/dlp/archive.hpp"
#include "sluice/dlp/variants.hpp"

#include "variant_detail.hpp"

#include <string>

namespace sluice::dlp {

namespace {

constexpr std::size_t max_archives = 16;      // zip archives after other bytes, per buffer
constexpr std::size_t max_member_label = 256; // longer member paths are cut in the location

// "archive:<member>", or "<outer>/<member>" inside an archive's member.
std::string member_location(std::string_view outer, std::string_view member) {
    std::string out = outer.starts_with("archive:") ? std::string(outer) + "/" : "archive:";
    out += member.substr(0, max_member_label);
    return out;
}

} // namespace

variant_status variant_scanner::scan_archives(std::string_view data, const std::string& prefix,
                                              std::size_t depth, std::size_t outer_off,
                                              std::size_t outer_len, ctx& c) {
    if (!opts_.decoders || !archive::may_hold_archive(data))
        return variant_status::ok;
    const std::string outer(c.location);
    variant_status st = variant_status::ok;
    std::string chain;
    std::vector<variant_finding> in_path;
    const auto clean_path = [&](std::string_view path) {
        in_path.clear();
        ctx pc;
        pc.location = "archive:path";
        pc.out = &in_path;
        std::string path_chain;
        st = process(path, path_chain, 0, 0, variant_detail::npos, pc);
        return st == variant_status::ok && in_path.empty();
    };
    const auto each = [&](std::string_view format, std::string_view member,
                          std::string_view bytes) {
        // An archive inside this many layers would go out unscanned: over budget instead.
        if (depth >= opts_.budget.max_depth || !charge(bytes.size())) {
            st = variant_status::over_budget;
            return false;
        }
        chain = prefix.empty() ? std::string(format) : prefix + ">" + std::string(format);
        std::string where = member_location(outer, member.empty() ? "[names]" : member);
        // The path (outer members' names included) is the sender's text: one that holds a
        // finding is not put in a record. Its finding is reported from the names list.
        if (!clean_path(std::string_view(where).substr(8))) {
            if (st != variant_status::ok)
                return false;
            where = member.empty() ? "archive:[redacted]/[names]" : "archive:[redacted]";
        }
        ctx sub;
        sub.location = where;
        sub.out = c.out;
        std::swap(sub.seen, c.seen); // one set of reported findings for the whole body
        st = process(bytes, chain, depth + 1, outer_off, outer_len, sub);
        std::swap(sub.seen, c.seen);
        return st == variant_status::ok;
    };
    switch (archive::read_archives(data, decode_room(), max_archives, each)) {
    case archive::read_status::ok:
    case archive::read_status::not_archive:
    case archive::read_status::stopped:
        return st;
    case archive::read_status::over_limit:
        return variant_status::over_budget;
    case archive::read_status::malformed:
        // A decoded buffer (depth > 0) can be a text transform's copy of an archive (a
        // Unicode fold of a zip's bytes), which no reader could open either; the members
        // read before the break went through process() already. As sent, or as a part of
        // one, a recognised archive that cannot be read whole is refused.
        if (depth > 0)
            return st;
        return variant_status::bad_encoding;
    case archive::read_status::encrypted:
        // Recognised but not readable whole: refused, never forwarded half read.
        return variant_status::bad_encoding;
    }
    return variant_status::bad_encoding;
}

} // namespace sluice::dlp
