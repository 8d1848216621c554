// Decide, record, then forward (audit_log.hpp): start records, their completions, what
// verify says about a start cut by a crash, and space reserved for completions so that a
// started exchange can always be completed, measured against a real file-size limit.
#include "sluice/proxy/audit_log.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using sluice::proxy::audit_log;
using sluice::proxy::audit_options;
using sluice::proxy::audit_record;
using sluice::proxy::verify_audit_chain;

struct temp_dir {
    fs::path path;
    temp_dir() {
        std::random_device rd;
        path = fs::temp_directory_path() / ("sluice-start-end-" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

audit_record exchange(int i) {
    audit_record r;
    r.flow = "flow-" + std::to_string(i);
    r.identity = "agent";
    r.source = "127.0.0.1:4000";
    r.method = "POST";
    r.url = "https://api.example.com/v1/item/" + std::to_string(i);
    r.decision = "allow";
    r.findings.push_back({"github-pat-classic", "body", "raw", 6, "sha256:0123456789abcdef"});
    return r;
}

// The seq the writer gave a record (0 = not written), waiting for its batch.
std::uint64_t append_seq(audit_log& log, audit_record r) {
    std::promise<std::uint64_t> p;
    auto f = p.get_future();
    log.async_append_seq(std::move(r), [&p](std::uint64_t seq) { p.set_value(seq); });
    return f.get();
}

audit_record start_of(audit_record r) {
    r.event = "start";
    return r;
}

audit_record end_of(audit_record r, std::uint64_t start_seq) {
    r.event = "end";
    r.completes = start_seq;
    r.bytes_up = 12345;
    r.bytes_down = 678901;
    r.duration_ms = 42;
    r.reason = "relay_interrupted";
    return r;
}

std::vector<boost::json::object> records_of(const fs::path& p) {
    std::ifstream in(p);
    std::vector<boost::json::object> out;
    for (std::string line; std::getline(in, line);)
        out.push_back(boost::json::parse(line).as_object());
    return out;
}

TEST(audit_start_end_test, start_and_end_are_chained_and_the_end_names_its_start) {
    temp_dir d;
    auto log = audit_log::open(d.path / "audit.jsonl", audit_options{});
    ASSERT_TRUE(log.has_value()) << log.error();
    const auto s1 = append_seq(**log, start_of(exchange(1)));
    ASSERT_NE(s1, 0u);
    EXPECT_TRUE((*log)->append(exchange(2))); // a denial between: one whole record
    const auto e1 = append_seq(**log, end_of(exchange(1), s1));
    EXPECT_EQ(e1, s1 + 2);
    (*log)->close();

    auto recs = records_of(d.path / "audit.jsonl");
    ASSERT_EQ(recs.size(), 3u);
    EXPECT_EQ(recs[0].at("event").as_string(), "start");
    EXPECT_FALSE(recs[0].contains("completes"));
    EXPECT_FALSE(recs[1].contains("event")); // the old shape, unchanged
    EXPECT_FALSE(recs[1].contains("completes"));
    EXPECT_EQ(recs[2].at("event").as_string(), "end");
    EXPECT_EQ(recs[2].at("completes").as_int64(), static_cast<std::int64_t>(s1));
    // The end carries every field of the record as before, with the final figures.
    for (const char* k :
         {"ts", "seq", "flow", "identity", "source", "method", "url", "decision", "reason",
          "inspected", "findings", "bytes_up", "bytes_down", "duration_ms", "prev", "hash"})
        EXPECT_TRUE(recs[2].contains(k)) << k;
    EXPECT_EQ(recs[2].at("bytes_down").as_int64(), 678901);

    auto v = verify_audit_chain({d.path / "audit.jsonl"});
    EXPECT_TRUE(v.ok) << v.detail;
    EXPECT_EQ(v.cut, 0u);
    EXPECT_EQ(v.orphan_ends, 0u);
}

// Interval mode: a completion does not wake the writer while it waits for a start (it
// joins that batch), but one with no start after it is still written, within the delay.
TEST(audit_start_end_test, interval_mode_writes_a_completion_that_comes_alone) {
    temp_dir d;
    audit_options o;
    o.fsync_always = false;
    o.fsync_interval = std::chrono::seconds(1);
    auto log = audit_log::open(d.path / "audit.jsonl", o);
    ASSERT_TRUE(log.has_value()) << log.error();
    for (int i = 0; i < 3; ++i) {
        const auto s = append_seq(**log, start_of(exchange(i)));
        ASSERT_NE(s, 0u);
        std::promise<std::uint64_t> p;
        auto f = p.get_future();
        (*log)->async_append_seq(end_of(exchange(i), s),
                                 [&p](std::uint64_t seq) { p.set_value(seq); });
        ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
        EXPECT_EQ(f.get(), s + 1);
        EXPECT_EQ(records_of(d.path / "audit.jsonl").size(), 2u * (i + 1));
    }
    // One queued just before close is written by it, not lost.
    const auto s = append_seq(**log, start_of(exchange(9)));
    (*log)->async_append_seq(end_of(exchange(9), s), [](std::uint64_t) {});
    (*log)->close();
    auto v = verify_audit_chain({d.path / "audit.jsonl"});
    EXPECT_TRUE(v.ok) << v.detail;
    EXPECT_EQ(v.cut, 0u);
    EXPECT_EQ(v.records, 8u);
}

TEST(audit_start_end_test, a_start_without_its_end_is_reported_cut_not_a_chain_error) {
    temp_dir d;
    std::uint64_t cut_seq = 0;
    {
        auto log = audit_log::open(d.path / "audit.jsonl", audit_options{});
        ASSERT_TRUE(log.has_value());
        auto s1 = append_seq(**log, start_of(exchange(1)));
        cut_seq = append_seq(**log, start_of(exchange(2))); // never completed: "the crash"
        ASSERT_NE(cut_seq, 0u);
        ASSERT_NE(append_seq(**log, end_of(exchange(1), s1)), 0u);
    }
    {
        // After the restart the chain continues; the cut start stays open.
        auto log = audit_log::open(d.path / "audit.jsonl", audit_options{});
        ASSERT_TRUE(log.has_value());
        auto s3 = append_seq(**log, start_of(exchange(3)));
        ASSERT_NE(append_seq(**log, end_of(exchange(3), s3)), 0u);
    }
    auto v = verify_audit_chain({d.path / "audit.jsonl"});
    EXPECT_TRUE(v.ok) << v.what << ": " << v.detail;
    EXPECT_EQ(v.records, 5u);
    EXPECT_EQ(v.cut, 1u);
    ASSERT_EQ(v.cut_seqs.size(), 1u);
    EXPECT_EQ(v.cut_seqs[0], cut_seq);

    // A changed record is still a chain error, cut starts or not.
    std::vector<std::string> lines;
    {
        std::ifstream in(d.path / "audit.jsonl");
        for (std::string l; std::getline(in, l);)
            lines.push_back(l);
    }
    auto at = lines[1].find("flow-2");
    ASSERT_NE(at, std::string::npos);
    lines[1].replace(at, 6, "flow-9");
    {
        std::ofstream out(d.path / "audit.jsonl", std::ios::trunc);
        for (const auto& l : lines)
            out << l << '\n';
    }
    auto bad = verify_audit_chain({d.path / "audit.jsonl"});
    EXPECT_FALSE(bad.ok);
    EXPECT_EQ(bad.what, "changed");
}

// Runs `body` in a child process (a file-size limit and SIGXFSZ ignored must not leak into
// the test runner); the child's exit code is the failed check's number, 0 when all held.
int in_child(const std::function<int()>& body) {
    pid_t pid = ::fork();
    if (pid == 0)
        ::_exit(body());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// Starts exchanges under a file-size limit of `limit` bytes until the log refuses one, then
// completes every started one and writes a denial; the failed check's number, 0 when all
// held. With fsync_always the limit comes after open (every batch reads it); in interval
// mode before, as the figure is read at most 10 ms apart and the bytes written are taken
// off it in between, which is the path this exercises (`limit` above headroom + 1 MiB).
int fill_until_refused(const fs::path& path, bool fsync_always, rlim_t limit) {
    std::signal(SIGXFSZ, SIG_IGN); // a write past the limit fails with EFBIG instead
    struct rlimit rl {
        limit, limit
    };
    if (!fsync_always && ::setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 2;
    audit_options o;
    o.fsync_always = fsync_always;
    o.headroom = 2048;
    o.max_size = 0;
    auto log = audit_log::open(path, o);
    if (!log)
        return 1;
    if (fsync_always && ::setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 2;
    // Start exchanges until the writer refuses one: none of the refused is written.
    std::vector<std::uint64_t> started;
    for (int i = 0; i < 100000; ++i) {
        auto seq = append_seq(**log, start_of(exchange(i)));
        if (seq == 0)
            break;
        started.push_back(seq);
    }
    if (started.empty() || started.size() == 100000)
        return 3;
    if ((*log)->healthy())
        return 4; // refusing: new exchanges see it before they read a body
    if ((*log)->errors() != 1)
        return 5; // the refusal, counted once; no failed write
    // Every started exchange completes: the space was reserved for it. Queued together,
    // as flows do (in interval mode a completion alone waits for company: writer_loop).
    std::vector<std::promise<std::uint64_t>> ends(started.size());
    for (std::size_t i = 0; i < started.size(); ++i)
        (*log)->async_append_seq(end_of(exchange(static_cast<int>(i)), started[i]),
                                 [&p = ends[i]](std::uint64_t seq) { p.set_value(seq); });
    for (auto& p : ends)
        if (p.get_future().get() == 0)
            return 6;
    if ((*log)->bytes_reserved() != 0)
        return 7;
    // A denial still fits in the headroom.
    auto deny = exchange(999999);
    deny.decision = "deny";
    deny.reason = "audit_unavailable";
    if (!(*log)->append(deny))
        return 8;
    (*log)->close();
    auto v = verify_audit_chain({path});
    if (!v.ok || v.cut != 0 || v.records != 2 * started.size() + 1)
        return 9;
    return 0;
}

TEST(audit_start_end_test, starts_are_refused_while_completions_still_fit) {
    temp_dir d;
    int rc = in_child([&] { return fill_until_refused(d.path / "audit.jsonl", true, 32 * 1024); });
    EXPECT_EQ(rc, 0) << "check " << rc << " failed";
}

TEST(audit_start_end_test, interval_mode_counts_its_own_bytes_between_looks) {
    temp_dir d;
    int rc = in_child([&] { return fill_until_refused(d.path / "audit.jsonl", false, 3 << 20); });
    EXPECT_EQ(rc, 0) << "check " << rc << " failed";
}

} // namespace
