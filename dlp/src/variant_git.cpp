// A git push through the variant pipeline (variants.hpp scan_body, issue 21): the body is
// opened with git.hpp and every object the push adds goes through process() under a
// location of its own, so a key committed in a file, a commit message or a file name is
// found like one in a JSON body, decoders and all.
#include "sluice/dlp/git.hpp"
#include "sluice/dlp/variants.hpp"

#include "variant_detail.hpp"

#include <string>

namespace sluice::dlp {

namespace {

// "git:blob:" + path -> the prefix, for a path that must not reach a record.
std::string redacted(std::string_view location) {
    const auto second = location.find(':', 4);
    if (second == std::string_view::npos || location.substr(0, second) == "git:commit" ||
        location.substr(0, second) == "git:tag" || location == "git:commands")
        return std::string(location);
    return std::string(location.substr(0, second + 1)) + "[redacted]";
}

} // namespace

variant_status variant_scanner::scan_git(std::string_view data, std::string_view ct, ctx& c) {
    const bool push = ct == variant_detail::receive_pack_type;
    if (!push && !git::is_pack(data))
        return variant_status::ok;
    const std::string_view outer = c.location;
    std::string where;
    variant_status st = variant_status::ok;
    const auto each = [&](std::string_view location, std::string_view bytes) {
        if (!charge(bytes.size())) {
            st = variant_status::over_budget;
            return false;
        }
        const std::size_t before = c.out->size();
        where = std::string(location);
        c.location = where;
        std::string chain;
        st = process(bytes, chain, 0, 0, variant_detail::npos, c);
        c.location = outer;
        if (st != variant_status::ok)
            return false;
        const bool named = location.starts_with("git:blob:") || location.starts_with("git:tree:");
        if (c.out->size() == before || !named)
            return true;
        // The path is the agent's text: scanned before it names a finding in a record.
        std::vector<variant_finding> in_path;
        ctx pc;
        pc.location = "git:path";
        pc.out = &in_path;
        std::string path_chain;
        const std::string_view path = location.substr(location.find(':', 4) + 1);
        st = process(path, path_chain, 0, 0, variant_detail::npos, pc);
        if (!in_path.empty())
            for (std::size_t i = before; i < c.out->size(); ++i)
                (*c.out)[i].location = redacted(location);
        return st == variant_status::ok;
    };
    const std::size_t room = decode_room();
    const auto rs =
        push ? git::read_receive_pack(data, room, each) : git::read_pack(data, room, each);
    switch (rs) {
    case git::read_status::ok:
    case git::read_status::stopped:
        return st;
    case git::read_status::not_git:
        return push ? variant_status::bad_encoding : variant_status::ok;
    case git::read_status::over_limit:
        return variant_status::over_budget;
    case git::read_status::io_error:
        return variant_status::scanner_error;
    case git::read_status::malformed:
    case git::read_status::incomplete:
        // A push, or a body that starts like a pack, is read whole or not sent.
        return variant_status::bad_encoding;
    }
    return variant_status::bad_encoding;
}

} // namespace sluice::dlp
