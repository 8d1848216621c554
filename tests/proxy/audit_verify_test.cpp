// sluice audit verify: a real log is written, then a copy is edited, has a record deleted,
// two records swapped, or its tail cut, and verification must name the first bad record.
#include "sluice/proxy/audit_log.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
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
        path = fs::temp_directory_path() / ("sluice-verify-" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

audit_record rec(int i) {
    audit_record r;
    r.flow = "flow-" + std::to_string(i);
    r.identity = i % 2 ? "agent" : "";
    r.source = "127.0.0.1:4000";
    r.method = "GET";
    r.url = "https://example.com/item/" + std::to_string(i);
    r.decision = i % 3 ? "allow" : "deny";
    r.reason = i % 3 ? "" : "dlp_finding";
    if (!(i % 3))
        r.findings.push_back(
            {"aws-access-key-id", "body", "gzip>base64", 12, "sha256:00112233aabbccdd"});
    return r;
}

fs::path write_log(const fs::path& dir, int n, audit_options o = {}) {
    auto log = audit_log::open(dir / "audit.jsonl", o);
    EXPECT_TRUE(log.has_value());
    for (int i = 1; i <= n; ++i)
        EXPECT_TRUE((*log)->append(rec(i)));
    return dir / "audit.jsonl";
}

std::vector<std::string> lines_of(const fs::path& p) {
    std::ifstream in(p);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);)
        out.push_back(l);
    return out;
}

void write_lines(const fs::path& p, const std::vector<std::string>& lines, bool final_nl = true) {
    std::ofstream out(p, std::ios::trunc | std::ios::binary);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        out << lines[i];
        if (i + 1 < lines.size() || final_nl)
            out << '\n';
    }
}

TEST(audit_verify_test, intact_log_verifies) {
    temp_dir d;
    auto p = write_log(d.path, 10);
    auto r = verify_audit_chain({p});
    EXPECT_TRUE(r.ok) << r.what << " " << r.detail;
    EXPECT_EQ(r.records, 10u);
    EXPECT_EQ(r.first_seq, 1u);
    EXPECT_EQ(r.last_seq, 10u);
}

TEST(audit_verify_test, edited_record_is_reported_as_changed) {
    temp_dir d;
    auto p = write_log(d.path, 10);
    auto lines = lines_of(p);
    auto at = lines[4].find("/item/5");
    ASSERT_NE(at, std::string::npos);
    lines[4].replace(at, 7, "/item/X");
    write_lines(p, lines);
    auto r = verify_audit_chain({p});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.what, "changed");
    EXPECT_EQ(r.line, 5u);
    EXPECT_EQ(r.seq, 5u);
    EXPECT_EQ(r.last_seq, 4u);
}

TEST(audit_verify_test, deleted_record_is_reported_as_removed) {
    temp_dir d;
    auto p = write_log(d.path, 10);
    auto lines = lines_of(p);
    lines.erase(lines.begin() + 6); // seq 7
    write_lines(p, lines);
    auto r = verify_audit_chain({p});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.what, "removed");
    EXPECT_EQ(r.line, 7u);
    EXPECT_EQ(r.seq, 8u);
    EXPECT_NE(r.detail.find("7..7"), std::string::npos) << r.detail;
}

TEST(audit_verify_test, deleting_the_first_record_is_removed_unless_partial) {
    temp_dir d;
    auto p = write_log(d.path, 5);
    auto lines = lines_of(p);
    lines.erase(lines.begin());
    write_lines(p, lines);
    auto r = verify_audit_chain({p});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.what, "removed");
    EXPECT_EQ(r.line, 1u);
    auto partial = verify_audit_chain({p}, true);
    EXPECT_TRUE(partial.ok);
    EXPECT_EQ(partial.first_seq, 2u);
}

TEST(audit_verify_test, swapped_records_are_reported_as_reordered) {
    temp_dir d;
    auto p = write_log(d.path, 10);
    auto lines = lines_of(p);
    std::swap(lines[2], lines[3]); // seq 3 and 4
    write_lines(p, lines);
    auto r = verify_audit_chain({p});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.what, "reordered");
    EXPECT_EQ(r.line, 3u);
    EXPECT_EQ(r.seq, 4u);
}

TEST(audit_verify_test, cut_tail_is_reported_as_truncated) {
    temp_dir d;
    auto p = write_log(d.path, 10);
    auto size = fs::file_size(p);
    fs::resize_file(p, size - 30);
    auto r = verify_audit_chain({p});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.what, "truncated");
    EXPECT_EQ(r.line, 10u);
    EXPECT_EQ(r.last_seq, 9u);
}

TEST(audit_verify_test, rewritten_record_with_recomputed_hash_breaks_the_next_link) {
    // An attacker who edits a record and recomputes its hash is caught by the next one.
    temp_dir d;
    auto p = write_log(d.path, 4);
    auto lines = lines_of(p);
    fs::path other = d.path / "other.jsonl";
    {
        auto log = audit_log::open(other, true);
        ASSERT_TRUE(log.has_value());
        ASSERT_TRUE((*log)->append(rec(1))); // a valid, self-consistent seq 1
    }
    lines[0] = lines_of(other)[0];
    write_lines(p, lines);
    auto r = verify_audit_chain({p});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.what, "changed");
    EXPECT_EQ(r.seq, 2u);
}

TEST(audit_verify_test, rotation_continues_the_chain_across_files) {
    temp_dir d;
    audit_options o;
    o.max_size = 2000; // a few records per file
    write_log(d.path, 40, o);
    std::vector<fs::path> rotated;
    for (const auto& e : fs::directory_iterator(d.path))
        if (e.path().filename().string().starts_with("audit.jsonl."))
            rotated.push_back(e.path());
    ASSERT_GE(rotated.size(), 3u);
    std::sort(rotated.begin(), rotated.end());
    for (const auto& f : rotated)
        EXPECT_LE(fs::file_size(f), 2000u);
    auto all = rotated;
    all.push_back(d.path / "audit.jsonl");
    auto r = verify_audit_chain(all);
    EXPECT_TRUE(r.ok) << r.file << ":" << r.line << " " << r.what << " " << r.detail;
    EXPECT_EQ(r.records, 40u);
    // A rotated file left out is a removal at the start of the next file.
    auto missing = all;
    missing.erase(missing.begin() + 1);
    auto m = verify_audit_chain(missing);
    EXPECT_FALSE(m.ok);
    EXPECT_EQ(m.what, "removed");
    EXPECT_EQ(m.file, all[2].string());
    EXPECT_EQ(m.line, 1u);
    // Files given in the wrong order are reordered.
    auto swapped = all;
    std::swap(swapped[0], swapped[1]);
    auto s = verify_audit_chain(swapped);
    EXPECT_FALSE(s.ok);
    EXPECT_EQ(s.what, "reordered");
}

TEST(audit_verify_test, removed_live_file_is_recreated_and_chain_continues) {
    temp_dir d;
    auto log = audit_log::open(d.path / "audit.jsonl", true);
    ASSERT_TRUE(log.has_value());
    ASSERT_TRUE((*log)->append(rec(1)));
    fs::rename(d.path / "audit.jsonl", d.path / "moved.jsonl");
    ASSERT_TRUE((*log)->append(rec(2)));
    EXPECT_EQ((*log)->errors(), 1u);
    ASSERT_TRUE(fs::exists(d.path / "audit.jsonl"));
    auto r = verify_audit_chain({d.path / "moved.jsonl", d.path / "audit.jsonl"});
    EXPECT_TRUE(r.ok) << r.what << " " << r.detail;
    EXPECT_EQ(r.records, 2u);
}

TEST(audit_verify_test, interval_fsync_mode_writes_every_record) {
    temp_dir d;
    audit_options o;
    o.fsync_always = false;
    o.fsync_interval = std::chrono::milliseconds(10);
    auto p = write_log(d.path, 20, o);
    auto r = verify_audit_chain({p});
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.records, 20u);
}

TEST(audit_verify_test, missing_file_is_unreadable) {
    auto r = verify_audit_chain({"/nonexistent/sluice/audit.jsonl"});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.what, "unreadable");
}

} // namespace

// Group commit: records from many threads through async_append and append, with rotation,
// form one intact chain; every completion is called once, with true. In interval mode too,
// where the file and free space are looked at only every 10 ms.
static void many_threads_form_one_chain(bool fsync_always) {
    temp_dir d;
    audit_options o;
    o.fsync_always = fsync_always;
    o.max_size = 8000; // rotations inside batches
    constexpr int threads = 4, per_thread = 150;
    std::atomic<int> done{0}, failed{0};
    {
        auto log = audit_log::open(d.path / "audit.jsonl", o);
        ASSERT_TRUE(log.has_value());
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t) {
            ts.emplace_back([&, t] {
                for (int i = 0; i < per_thread; ++i) {
                    if (i % 10 == 0) { // the synchronous path interleaved
                        if ((*log)->append(rec(t * 1000 + i)))
                            done.fetch_add(1);
                        else
                            failed.fetch_add(1);
                        continue;
                    }
                    (*log)->async_append(rec(t * 1000 + i),
                                         [&](bool ok) { (ok ? done : failed).fetch_add(1); });
                }
            });
        }
        for (auto& t : ts)
            t.join();
    } // the destructor writes what is still queued
    EXPECT_EQ(failed.load(), 0);
    EXPECT_EQ(done.load(), threads * per_thread);
    std::vector<fs::path> all;
    for (const auto& e : fs::directory_iterator(d.path))
        if (e.path().filename().string().starts_with("audit.jsonl."))
            all.push_back(e.path());
    ASSERT_GE(all.size(), 2u);
    std::sort(all.begin(), all.end());
    all.push_back(d.path / "audit.jsonl");
    auto r = verify_audit_chain(all);
    EXPECT_TRUE(r.ok) << r.file << ":" << r.line << " " << r.what << " " << r.detail;
    EXPECT_EQ(r.records, static_cast<std::uint64_t>(threads * per_thread));
}

TEST(audit_verify_test, async_appends_from_many_threads_form_one_chain) {
    many_threads_form_one_chain(true);
}

TEST(audit_verify_test, interval_mode_appends_from_many_threads_form_one_chain) {
    many_threads_form_one_chain(false);
}

TEST(audit_verify_test, async_append_failure_is_reported_to_every_waiter) {
    if (!fs::exists("/dev/full"))
        GTEST_SKIP() << "/dev/full not available";
    auto log = audit_log::open("/dev/full", false);
    ASSERT_TRUE(log.has_value()) << log.error();
    std::promise<bool> a, b;
    (*log)->async_append(rec(1), [&](bool ok) { a.set_value(ok); });
    (*log)->async_append(rec(2), [&](bool ok) { b.set_value(ok); });
    EXPECT_FALSE(a.get_future().get());
    EXPECT_FALSE(b.get_future().get());
    EXPECT_FALSE((*log)->healthy());
}

// close() returns once every queued record is written and its completion has run (the
// server calls it before its io_contexts go); an async_append after it writes and
// completes on the caller's thread, so no record is dropped at shutdown.
TEST(audit_verify_test, close_drains_the_queue_and_later_appends_still_write) {
    temp_dir d;
    auto log = audit_log::open(d.path / "audit.jsonl", audit_options{});
    ASSERT_TRUE(log.has_value()) << log.error();
    constexpr int queued = 300;
    std::atomic<int> done{0};
    // The writer is held inside the first completion until the test lets it go: close()
    // must not return before then, whatever the disk's speed.
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    (*log)->async_append(rec(1), [&, released](bool ok) {
        released.wait();
        if (ok)
            done.fetch_add(1);
    });
    for (int i = 2; i <= queued; ++i)
        (*log)->async_append(rec(i), [&](bool ok) {
            if (ok)
                done.fetch_add(1);
        });
    std::atomic<bool> closed{false};
    std::thread closer([&] {
        (*log)->close();
        closed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(closed.load()) << "close() returned while a completion was still running";
    release.set_value();
    closer.join();
    EXPECT_EQ(done.load(), queued);

    std::thread::id ran_on;
    bool written = false;
    (*log)->async_append(rec(queued + 1), [&](bool ok) {
        ran_on = std::this_thread::get_id();
        written = ok;
    });
    EXPECT_EQ(ran_on, std::this_thread::get_id());
    EXPECT_TRUE(written);
    (*log)->close(); // idempotent
    log->reset();
    auto r = verify_audit_chain({d.path / "audit.jsonl"});
    EXPECT_TRUE(r.ok) << r.file << ":" << r.line << " " << r.what << " " << r.detail;
    EXPECT_EQ(r.records, static_cast<std::uint64_t>(queued + 1));
}
