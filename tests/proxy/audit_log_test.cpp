#include "sluice/proxy/audit_log.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using sluice::proxy::audit_log;
using sluice::proxy::audit_record;

fs::path temp_dir() {
    std::random_device rd;
    auto dir = fs::temp_directory_path() / ("sluice-audit-" + std::to_string(rd()));
    fs::create_directories(dir);
    return dir;
}

std::vector<boost::json::object> read_records(const fs::path& p) {
    std::ifstream in(p);
    std::vector<boost::json::object> out;
    for (std::string line; std::getline(in, line);)
        out.push_back(boost::json::parse(line).as_object());
    return out;
}

std::string sha256_hex(const std::string& s) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
    std::string hex;
    char b[3];
    for (unsigned i = 0; i < n; ++i) {
        std::snprintf(b, sizeof b, "%02x", md[i]);
        hex += b;
    }
    return hex;
}

audit_record sample(std::string decision) {
    audit_record r;
    r.flow = "f1";
    r.identity = "local";
    r.source = "127.0.0.1:5000";
    r.method = "POST";
    r.url = "https://api.example.com/v1/x";
    r.decision = std::move(decision);
    r.findings.push_back({"github-pat-classic", "body", "raw", 6, "sha256:0123456789abcdef"});
    return r;
}

TEST(audit_log_test, writes_one_line_per_record_with_contract_fields) {
    auto dir = temp_dir();
    auto log = audit_log::open(dir / "sub" / "audit.jsonl", true);
    ASSERT_TRUE(log.has_value()) << log.error();
    ASSERT_TRUE((*log)->append(sample("allow")));
    ASSERT_TRUE((*log)->append(sample("deny")));
    auto recs = read_records(dir / "sub" / "audit.jsonl");
    ASSERT_EQ(recs.size(), 2u);
    for (const char* key :
         {"ts", "seq", "flow", "identity", "source", "method", "url", "decision", "reason",
          "findings", "bytes_up", "bytes_down", "duration_ms", "prev", "hash"})
        EXPECT_TRUE(recs[0].contains(key)) << key;
    EXPECT_EQ(recs[0].at("seq").as_int64(), 1);
    EXPECT_EQ(recs[1].at("seq").as_int64(), 2);
    EXPECT_EQ(recs[1].at("decision").as_string(), "deny");
    const auto& f = recs[1].at("findings").as_array().at(0).as_object();
    EXPECT_EQ(f.at("rule").as_string(), "github-pat-classic");
    EXPECT_EQ(f.at("location").as_string(), "body");
    struct stat st {};
    ASSERT_EQ(::stat((dir / "sub" / "audit.jsonl").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    fs::remove_all(dir);
}

TEST(audit_log_test, hash_chain_links_records_and_covers_their_content) {
    auto dir = temp_dir();
    auto log = audit_log::open(dir / "audit.jsonl", true);
    ASSERT_TRUE(log.has_value());
    ASSERT_TRUE((*log)->append(sample("allow")));
    ASSERT_TRUE((*log)->append(sample("deny")));
    auto recs = read_records(dir / "audit.jsonl");
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].at("prev").as_string(), "");
    EXPECT_EQ(recs[1].at("prev").as_string(), recs[0].at("hash").as_string());
    for (auto rec : recs) {
        std::string hash(rec.at("hash").as_string());
        rec.erase("hash");
        EXPECT_EQ(sha256_hex(boost::json::serialize(rec)), hash);
    }
    fs::remove_all(dir);
}

TEST(audit_log_test, a_fleet_replica_names_itself_in_every_record_under_the_hash) {
    auto dir = temp_dir();
    sluice::proxy::audit_options o;
    o.replica = "gw-7f9c-0a1b2c3d";
    {
        auto log = audit_log::open(dir / "audit.jsonl", o);
        ASSERT_TRUE(log.has_value()) << log.error();
        ASSERT_TRUE((*log)->append(sample("allow")));
        ASSERT_TRUE((*log)->append(sample("deny")));
    }
    {
        // Without a replica (no control store) the member is not written at all.
        auto log = audit_log::open(dir / "audit.jsonl", true);
        ASSERT_TRUE(log.has_value()) << log.error();
        ASSERT_TRUE((*log)->append(sample("allow")));
    }
    auto recs = read_records(dir / "audit.jsonl");
    ASSERT_EQ(recs.size(), 3u);
    EXPECT_EQ(recs[0].at("replica").as_string(), "gw-7f9c-0a1b2c3d");
    EXPECT_EQ(recs[1].at("replica").as_string(), "gw-7f9c-0a1b2c3d");
    EXPECT_FALSE(recs[2].contains("replica"));
    // The name is covered by the chain: changing it breaks verification.
    EXPECT_TRUE(sluice::proxy::verify_audit_chain({dir / "audit.jsonl"}).ok);
    std::ifstream in(dir / "audit.jsonl");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    in.close();
    auto at = text.find("gw-7f9c-0a1b2c3d");
    ASSERT_NE(at, std::string::npos);
    text[at] = 'G';
    std::ofstream(dir / "audit.jsonl", std::ios::binary | std::ios::trunc) << text;
    auto v = sluice::proxy::verify_audit_chain({dir / "audit.jsonl"});
    EXPECT_FALSE(v.ok);
    EXPECT_EQ(v.what, "changed");
    fs::remove_all(dir);
}

TEST(audit_log_test, reopening_continues_seq_and_chain) {
    auto dir = temp_dir();
    {
        auto log = audit_log::open(dir / "audit.jsonl", true);
        ASSERT_TRUE(log.has_value());
        ASSERT_TRUE((*log)->append(sample("allow")));
    }
    auto log = audit_log::open(dir / "audit.jsonl", false);
    ASSERT_TRUE(log.has_value());
    ASSERT_TRUE((*log)->append(sample("allow")));
    auto recs = read_records(dir / "audit.jsonl");
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[1].at("seq").as_int64(), 2);
    EXPECT_EQ(recs[1].at("prev").as_string(), recs[0].at("hash").as_string());
    fs::remove_all(dir);
}

TEST(audit_log_test, refuses_to_continue_after_a_garbled_last_line) {
    auto dir = temp_dir();
    {
        std::ofstream out(dir / "audit.jsonl");
        out << "{\"seq\":1,\"hash\":\"ab\"\n"; // truncated record
    }
    auto log = audit_log::open(dir / "audit.jsonl", true);
    ASSERT_FALSE(log.has_value());
    EXPECT_NE(log.error().find("audit.jsonl"), std::string::npos);
    fs::remove_all(dir);
}

TEST(audit_log_test, unwritable_location_is_an_error_naming_the_file) {
    auto dir = temp_dir();
    fs::create_directories(dir / "is-a-dir");
    auto log = audit_log::open(dir / "is-a-dir", true);
    ASSERT_FALSE(log.has_value());
    EXPECT_NE(log.error().find("is-a-dir"), std::string::npos);
    fs::remove_all(dir);
}

TEST(audit_log_test, failed_write_reports_false_and_marks_unhealthy) {
    if (!fs::exists("/dev/full"))
        GTEST_SKIP() << "/dev/full not available";
    auto log = audit_log::open("/dev/full", false);
    ASSERT_TRUE(log.has_value()) << log.error();
    EXPECT_TRUE((*log)->healthy());
    EXPECT_FALSE((*log)->append(sample("allow")));
    EXPECT_FALSE((*log)->healthy());
}

TEST(audit_log_test, redact_query_replaces_every_value_and_keeps_names) {
    // A word without '=' may be (part of) a secret: it is a value.
    EXPECT_EQ(audit_log::redact_query("https://h/p?a=1&key=secret&flag", true),
              "https://h/p?a=[redacted]&key=[redacted]&[redacted]");
    EXPECT_EQ(audit_log::redact_query("https://h/p?ghp_first&half2&&x=", true),
              "https://h/p?[redacted]&[redacted]&&x=[redacted]");
    EXPECT_EQ(audit_log::redact_query("https://h/p?a=1", false), "https://h/p?a=1");
    EXPECT_EQ(audit_log::redact_query("https://h/p", true), "https://h/p");
    EXPECT_EQ(audit_log::redact_query("https://h/p?x=1#frag", true), "https://h/p?x=[redacted]");
}

// Records are written without a DOM (audit_line.cpp): each line must be exactly what
// Boost.JSON writes for the object it parses to, every optional member and every escape
// included, so readers and the chain see canonical JSON.
TEST(audit_log_test, lines_are_canonical_json_with_every_member_and_escape) {
    auto dir = temp_dir();
    sluice::proxy::audit_options o;
    o.replica = "pod \"q\"-0a1b2c3d"; // escaped like every other string member
    auto log = audit_log::open(dir / "audit.jsonl", o);
    ASSERT_TRUE(log.has_value());
    audit_record r = sample("supervise_approved");
    r.identity = "team \"a\" \\ b";
    r.method = std::string("PO\x01ST\x1f", 6);
    r.url = "https://h.example/p?q=\t\r\n\x7f\xc3\xa9\xe2\x82\xac";
    r.reason = std::string("nul\0byte", 8);
    r.findings.push_back({"r2", "header:x-\"q\"", "base64>gzip", 1u << 31, "sha256:ff"});
    r.credentials = {"github", "a\\b"};
    r.masked_bytes = 12;
    r.websocket = true;
    r.ws_messages_up = 3;
    r.ws_messages_down = 18446744073709551615ull;
    r.bytes_up = 1;
    r.bytes_down = 2;
    r.duration_ms = 3;
    r.approval =
        sluice::proxy::audit_approval{"ap-1", "ops \"x\"", "2026-12-03T00:00:00.000Z", "ok\n"};
    r.event = "end";
    r.completes = 7;
    ASSERT_TRUE((*log)->append(r));
    audit_record bare; // identity null, no findings, no optional member
    bare.inspected = false;
    ASSERT_TRUE((*log)->append(bare));
    std::ifstream in(dir / "audit.jsonl");
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) {
        auto v = boost::json::parse(line);
        EXPECT_EQ(boost::json::serialize(v), line);
    }
    EXPECT_EQ(lines, 2);
    auto recs = read_records(dir / "audit.jsonl");
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].at("identity").as_string(), r.identity);
    EXPECT_EQ(recs[0].at("method").as_string(), r.method);
    EXPECT_EQ(recs[0].at("url").as_string(), r.url);
    EXPECT_EQ(recs[0].at("reason").as_string(), r.reason);
    EXPECT_EQ(recs[0].at("ws_messages_down").as_uint64(), r.ws_messages_down);
    EXPECT_EQ(recs[0].at("approval").at("reason").as_string(), "ok\n");
    EXPECT_EQ(recs[0].at("findings").as_array().size(), 2u);
    EXPECT_EQ(recs[0].at("credentials").as_array().at(1).as_string(), "a\\b");
    EXPECT_EQ(recs[0].at("completes").as_int64(), 7);
    EXPECT_EQ(recs[0].at("replica").as_string(), o.replica);
    EXPECT_TRUE(recs[1].at("identity").is_null());
    EXPECT_FALSE(recs[1].at("inspected").as_bool());
    EXPECT_FALSE(recs[1].contains("approval"));
    fs::remove_all(dir);
}

} // namespace
