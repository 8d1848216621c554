// Operations pieces that need no network: the log rate limiter and JSON line format, the
// metrics exposition (names, labels, values) and the admin token file.
#include "sluice/proxy/admin_api.hpp"
#include "sluice/proxy/log_limiter.hpp"
#include "sluice/proxy/metrics.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/stat.h>

namespace {

namespace fs = std::filesystem;
using namespace sluice::proxy;

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);)
        out.push_back(l);
    return out;
}

TEST(operations_test, rate_limited_sink_drops_a_flood_and_reports_it) {
    std::ostringstream os;
    auto inner = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
    auto sink = std::make_shared<rate_limited_sink>(inner, 1.0, 5.0);
    spdlog::logger log("t", sink);
    log.set_formatter(make_log_formatter(false));
    for (int i = 0; i < 1000; ++i)
        log.error("connection error {}", i);
    auto before = lines_of(os.str());
    EXPECT_EQ(before.size(), 5u);
    EXPECT_EQ(sink->suppressed_total(), 995u);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    log.error("after the flood");
    auto after = lines_of(os.str());
    ASSERT_EQ(after.size(), 7u);
    EXPECT_NE(after[5].find("995 log messages suppressed"), std::string::npos) << after[5];
    EXPECT_NE(after[6].find("after the flood"), std::string::npos);
}

// A sustained flood: the bucket refills all the time, but the suppressed count is reported
// once per window, not before every line that gets through.
TEST(operations_test, rate_limited_sink_reports_once_per_window_under_a_flood) {
    std::ostringstream os;
    auto inner = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
    auto sink = std::make_shared<rate_limited_sink>(inner, 2000.0, 5.0);
    spdlog::logger log("t", sink);
    log.set_formatter(make_log_formatter(false));
    const auto started = std::chrono::steady_clock::now();
    const auto flood = std::chrono::milliseconds(300);
    int sent = 0;
    while (std::chrono::steady_clock::now() - started < flood) {
        log.error("connection error {}", sent++);
    }
    const auto elapsed = std::chrono::steady_clock::now() - started;
    std::size_t summaries = 0;
    std::size_t passed = 0;
    for (const auto& l : lines_of(os.str())) {
        if (l.find("log messages suppressed") != std::string::npos)
            ++summaries;
        else
            ++passed;
    }
    ASSERT_GT(sink->suppressed_total(), 0u) << "the flood was not a flood";
    EXPECT_GT(passed, 5u); // the bucket refilled: lines kept flowing
    const auto windows = std::chrono::duration_cast<std::chrono::seconds>(elapsed).count() + 1;
    EXPECT_LE(summaries, static_cast<std::size_t>(windows)) << os.str().substr(0, 2000);
}

TEST(operations_test, json_lines_escape_the_message) {
    std::ostringstream os;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
    spdlog::logger log("t", sink);
    log.set_formatter(make_log_formatter(true));
    log.warn("quote \" backslash \\ newline \n tab \t ctl \x01 done");
    auto doc = boost::json::parse(lines_of(os.str()).at(0)).as_object();
    EXPECT_EQ(doc.at("level").as_string(), "warning");
    EXPECT_EQ(doc.at("msg").as_string(), "quote \" backslash \\ newline \n tab \t ctl \x01 done");
    EXPECT_TRUE(doc.contains("ts"));
}

TEST(operations_test, metrics_text_has_contract_names_and_counts) {
    metrics m;
    std::int64_t active = 3;
    m.set_connections_source([&] { return active; });
    m.set_audit_errors_source([] { return std::uint64_t{2}; });
    audit_record r;
    r.identity = "patcher";
    r.decision = "deny";
    r.findings.push_back({"aws-access-key-id", "body", "gzip>base64", 0, "sha256:00"});
    count_decision(m, r);
    count_decision(m, r);
    r.identity.clear();
    r.decision = "allow";
    r.findings.clear();
    count_decision(m, r);
    m.on_scan(1000, 0.0002);
    m.on_upstream_error("upstream_tls");
    m.on_config_reload(true);
    m.on_ws_message("up", "deny");
    m.set_approvals_pending(4);
    std::string t = m.text();
    for (const char* want :
         {R"(sluice_requests_total{decision="deny",identity="patcher"} 2)",
          R"(sluice_requests_total{decision="allow",identity="unresolved"} 1)",
          R"(sluice_findings_total{rule="aws-access-key-id",variant="gzip>base64"} 2)",
          "sluice_scanned_bytes_total 1000", "sluice_scan_seconds_count 1",
          "sluice_connections_active 3", "sluice_approvals_pending 4",
          R"(sluice_upstream_errors_total{reason="upstream_tls"} 1)",
          R"(sluice_config_reloads_total{result="ok"} 1)",
          R"(sluice_config_reloads_total{result="error"} 0)", "sluice_audit_errors_total 2",
          R"(sluice_ws_messages_total{decision="deny",direction="up"} 1)"})
        EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
}

TEST(operations_test, admin_token_is_created_0600_and_reused) {
    std::random_device rd;
    auto dir = fs::temp_directory_path() / ("sluice-token-" + std::to_string(rd()));
    auto file = dir / "sub" / "admin.token";
    auto t1 = load_or_create_admin_token(file);
    ASSERT_TRUE(t1.has_value()) << t1.error();
    EXPECT_EQ(t1->size(), 64u);
    EXPECT_EQ(t1->find_first_not_of("0123456789abcdef"), std::string::npos);
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    auto t2 = load_or_create_admin_token(file);
    ASSERT_TRUE(t2.has_value());
    EXPECT_EQ(*t1, *t2);
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
    auto t3 = load_or_create_admin_token(file);
    ASSERT_FALSE(t3.has_value());
    EXPECT_NE(t3.error().find("group or others"), std::string::npos);
    EXPECT_EQ(t3.error().find(*t1), std::string::npos) << "the error shows the token";
    fs::remove_all(dir);
}

} // namespace
