// sluice audit verify (audit_log.hpp verify_audit_chain): the chain's hashes, links and
// sequence across files, and start records left without their completion.
#include "sluice/proxy/audit_log.hpp"

#include "audit_hash.hpp"

#include <boost/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <unordered_set>

namespace sluice::proxy {

using detail::sha256_hex;
using detail::split_hashed_line;

namespace {

struct parsed_line {
    bool hashed = false; // has a well-formed trailing hash member
    bool json = false;   // parses as an object with integer seq and string prev
    std::uint64_t seq = 0;
    std::string prev;
    std::string hash;
    std::string body;
    bool start = false;          // "event":"start"
    std::uint64_t completes = 0; // "completes" of an end record
};

parsed_line parse_line(std::string_view line) {
    parsed_line p;
    p.hashed = split_hashed_line(line, p.body, p.hash);
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object())
        return p;
    const auto& o = v.as_object();
    const auto* seq = o.if_contains("seq");
    const auto* prev = o.if_contains("prev");
    if (seq == nullptr || !seq->is_int64() || seq->as_int64() < 1 || prev == nullptr ||
        !prev->is_string())
        return p;
    p.seq = static_cast<std::uint64_t>(seq->as_int64());
    p.prev = std::string(prev->as_string());
    p.json = true;
    if (const auto* ev = o.if_contains("event"); ev && ev->is_string())
        p.start = ev->as_string() == "start";
    if (const auto* c = o.if_contains("completes"); c && c->is_int64() && c->as_int64() > 0)
        p.completes = static_cast<std::uint64_t>(c->as_int64());
    return p;
}

// Reads lines of a file; `complete` is false for a last line without its newline.
template <class F>
bool for_each_line(const std::filesystem::path& file, F&& f) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return false;
    std::string line;
    std::size_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        bool complete = !in.eof();
        if (!f(n, std::string_view(line), complete))
            return true;
    }
    return !in.bad();
}

} // namespace

audit_verify_result verify_audit_chain(const std::vector<std::filesystem::path>& files,
                                       bool partial) {
    audit_verify_result res;
    // Pass 1: every seq present anywhere, to tell a record that was moved (reordered) from
    // one that is gone (removed).
    std::unordered_set<std::uint64_t> present;
    for (const auto& f : files) {
        bool readable = for_each_line(f, [&](std::size_t, std::string_view line, bool) {
            auto p = parse_line(line);
            if (p.json)
                present.insert(p.seq);
            return true;
        });
        if (!readable) {
            res.what = "unreadable";
            res.file = f.string();
            res.detail = std::string("cannot read the file: ") + std::strerror(errno);
            return res;
        }
    }

    // Starts still waiting for their completion, in chain order (std::set: ordered).
    std::set<std::uint64_t> open;
    bool have_prev = false;
    std::uint64_t prev_seq = 0;
    std::string prev_hash;
    bool stop = false;
    auto bad = [&](const std::filesystem::path& f, std::size_t line, std::uint64_t seq,
                   std::string what, std::string detail) {
        res.what = std::move(what);
        res.file = f.string();
        res.line = line;
        res.seq = seq;
        res.detail = std::move(detail);
        stop = true;
        return false;
    };
    for (std::size_t fi = 0; fi < files.size() && !stop; ++fi) {
        const auto& f = files[fi];
        bool last_file = fi + 1 == files.size();
        for_each_line(f, [&](std::size_t n, std::string_view line, bool complete) {
            auto p = parse_line(line);
            if (!complete && (!p.json || !p.hashed))
                return bad(f, n, p.seq, "truncated",
                           "the record is cut off (no end of line)" +
                               std::string(last_file ? "" : " in the middle of the chain"));
            if (!p.json || !p.hashed)
                return bad(f, n, p.seq, "changed", "the line is not a well-formed audit record");
            if (sha256_hex(p.body) != p.hash)
                return bad(f, n, p.seq, "changed", "the record's content does not match its hash");
            if (!have_prev) {
                if (!partial && (p.seq != 1 || !p.prev.empty())) {
                    std::string what = present.contains(1) ? "reordered" : "removed";
                    return bad(f, n, p.seq, what,
                               "the chain does not start at seq 1 (records before seq " +
                                   std::to_string(p.seq) +
                                   " are missing; pass --partial if older files were pruned)");
                }
                res.first_seq = p.seq;
            } else if (p.seq != prev_seq + 1) {
                if (p.seq <= prev_seq || present.contains(prev_seq + 1))
                    return bad(f, n, p.seq, "reordered",
                               "expected seq " + std::to_string(prev_seq + 1) + " here");
                return bad(f, n, p.seq, "removed",
                           "records " + std::to_string(prev_seq + 1) + ".." +
                               std::to_string(p.seq - 1) + " are missing");
            } else if (p.prev != prev_hash) {
                // This record is intact (its hash matches) and in sequence, so the one
                // before it was rewritten with a recomputed hash.
                return bad(f, n, p.seq, "changed",
                           "prev does not match the hash of record " + std::to_string(prev_seq) +
                               " (that record was rewritten)");
            }
            if (p.start)
                open.insert(p.seq);
            if (p.completes != 0 && open.erase(p.completes) == 0)
                ++res.orphan_ends;
            have_prev = true;
            prev_seq = p.seq;
            prev_hash = p.hash;
            res.last_seq = p.seq;
            res.last_hash = p.hash;
            ++res.records;
            return true;
        });
    }
    res.ok = !stop;
    res.cut = open.size();
    for (auto s : open) {
        if (res.cut_seqs.size() == 20)
            break;
        res.cut_seqs.push_back(s);
    }
    return res;
}

} // namespace sluice::proxy
