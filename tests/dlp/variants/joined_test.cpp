// Joined views (dlp/src/joined.hpp, issue 21): a secret cut over several values of one
// request — query values with junk between them, path segments, JSON fields of a tool call,
// form fields, multipart parts, SSE events — is found over the real built-in rules, with a
// variant naming the values it spans; the same values without the cut find nothing, and
// the limits the header documents hold (four parts with junk between them are not joined).
// Seams (dlp/seam.hpp): the ends of a message, the store that keeps them, and a seam scan
// that reports only what takes bytes from both messages.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/seam.hpp"
#include "sluice/dlp/variants.hpp"

#include "joined.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::dlp;

namespace {

// Checksum-valid GitHub token and an AWS key id, both from their rules' examples.
constexpr std::string_view gh = "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";
constexpr std::string_view aws = "AKIAIDVWTFKTANGPVYQE";

std::string cut(std::string_view s, std::size_t from, std::size_t to) {
    return std::string(s.substr(from, to - from));
}

class joined_test : public ::testing::Test {
protected:
    void SetUp() override {
        auto rules = config::builtin_ruleset();
        ASSERT_TRUE(rules.has_value());
        scanner_.emplace(*rules);
    }
    std::vector<variant_finding> url(std::string_view target) {
        variant_scanner vs(*scanner_);
        std::vector<variant_finding> out;
        EXPECT_EQ(vs.scan_url(target, "example.com", out), variant_status::ok);
        return out;
    }
    std::vector<variant_finding> body(std::string_view data, std::string_view ct) {
        variant_scanner vs(*scanner_);
        std::vector<variant_finding> out;
        EXPECT_EQ(vs.scan_body(data, ct, {}, out), variant_status::ok);
        return out;
    }
    static std::vector<std::string> variants(const std::vector<variant_finding>& fs) {
        std::vector<std::string> v;
        for (const auto& f : fs)
            v.push_back(f.f.rule_id + " " + f.variant);
        return v;
    }
    std::optional<detectors::scanner> scanner_;
};

} // namespace

TEST(joined_view, lines_and_spans) {
    joined::view v("query");
    v.add("AKIA");
    v.add("zz1");
    v.add("IDVW");
    v.add("TFKT");
    std::string out;
    std::vector<joined::mark> marks;
    std::size_t window_at = 0;
    ASSERT_TRUE(v.lines(out, marks, window_at));
    // The direct line, then windows; one window is parts 1, 3 and 4 with the junk left out.
    EXPECT_TRUE(out.starts_with("AKIAzz1IDVWTFKT\n"));
    const std::size_t at = out.find("AKIAIDVWTFKT\n");
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(joined::name_span(marks, at, 12), "1+3+4");
    EXPECT_EQ(joined::name_span(marks, at, 4), ""); // one value is not a join
    EXPECT_EQ(joined::name_span(marks, at + 2, 4), "1+3");
}

TEST(joined_view, a_value_with_words_gives_its_first_and_last_word) {
    joined::view v("json");
    v.add("the key is AKIAIDVW");
    v.add("TFKTANGPVYQE and that is all");
    std::string out;
    std::vector<joined::mark> marks;
    std::size_t window_at = 0;
    ASSERT_TRUE(v.lines(out, marks, window_at));
    EXPECT_NE(out.find("AKIAIDVWTFKTANGPVYQE"), std::string::npos);
    // The middle of a sentence is never glued to another value.
    EXPECT_EQ(out.find("key"), std::string::npos);
}

TEST(joined_view, without_marks_the_same_lines_and_with_a_split_only_the_crossing_ones) {
    joined::view v("seam");
    for (const char* s : {"AKIA", "zz1", "IDVW", "TFKT"})
        v.add(s);
    std::string all, fast, cut;
    std::vector<joined::mark> marks;
    std::size_t at_all = 0, at_fast = 0, at_cut = 0;
    ASSERT_TRUE(v.lines(all, marks, at_all));
    ASSERT_TRUE(v.lines(fast, nullptr, at_fast));
    EXPECT_EQ(fast, all);
    EXPECT_EQ(at_fast, at_all);
    // Split before the third value: "AKIAIDVW" and "zz1TFKT" cross it, "AKIAzz1" and
    // "IDVWTFKT" do not.
    ASSERT_TRUE(v.lines(cut, nullptr, at_cut, 2));
    EXPECT_NE(cut.find("AKIAIDVW\n"), std::string::npos);
    EXPECT_NE(cut.find("zz1TFKT\n"), std::string::npos);
    EXPECT_EQ(cut.find("AKIAzz1\n"), std::string::npos);
    EXPECT_EQ(cut.find("\nIDVWTFKT\n"), std::string::npos);
    EXPECT_FALSE(cut.starts_with("IDVWTFKT\n"));
    EXPECT_LT(cut.size(), all.size());
}

TEST(joined_view, nothing_to_join) {
    joined::view v("json");
    v.add("one");
    v.add("   ");
    std::string out;
    std::vector<joined::mark> marks;
    std::size_t window_at = 0;
    EXPECT_FALSE(v.lines(out, marks, window_at));
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(marks.empty());
}

TEST_F(joined_test, query_parts_with_junk_between_them) {
    const std::string q = "/upload?a=" + cut(gh, 0, 14) + "&junk=z-1&b=" + cut(gh, 14, 28) +
                          "&c=" + cut(gh, 28, gh.size());
    const auto fs = url(q);
    ASSERT_FALSE(fs.empty()) << q;
    EXPECT_EQ(fs[0].f.rule_id, "github-pat-classic");
    EXPECT_EQ(fs[0].variant, "query:1+3+4");
    EXPECT_EQ(fs[0].location, "url");
    // The same values, none of them cut from a token: nothing.
    EXPECT_TRUE(url("/upload?a=ghp_hello&junk=zz1&b=world&c=again").empty());
}

TEST_F(joined_test, path_segments) {
    const std::string p = "/v1/" + cut(aws, 0, 8) + "/" + cut(aws, 8, 20) + "/x";
    const auto fs = url(p);
    ASSERT_FALSE(fs.empty()) << p;
    EXPECT_EQ(fs[0].variant, "path:2+3");
}

TEST_F(joined_test, json_fields_of_a_tool_call_in_any_content_type) {
    const std::string call =
        R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"store",)"
        R"("arguments":{"access_key":")" +
        cut(aws, 0, 10) + R"(","note":"see below","key_suffix":")" + cut(aws, 10, 20) + R"("}}})";
    for (const std::string_view ct : {"application/json", "text/plain", ""}) {
        const auto fs = body(call, ct);
        ASSERT_FALSE(fs.empty()) << ct;
        EXPECT_TRUE(fs[0].variant.starts_with("json:")) << fs[0].variant;
    }
    // Escaped halves are joined unescaped.
    const std::string esc = R"({"a":"\u0041KIAIDVWTF","b":"KTANGPVYQE"})";
    EXPECT_FALSE(body(esc, "application/json").empty());
}

TEST_F(joined_test, broken_json_still_gives_the_values_before_the_break) {
    const std::string broken =
        R"({"a":")" + cut(gh, 0, 20) + R"(","b":")" + cut(gh, 20, gh.size()) + R"(", "c": tru)";
    const auto fs = body(broken, "application/json");
    ASSERT_FALSE(fs.empty());
    EXPECT_EQ(fs[0].variant, "json:1+2");
}

TEST_F(joined_test, form_multipart_and_sse) {
    const std::string form = "a=" + cut(gh, 0, 20) + "&b=hel-lo&c=" + cut(gh, 20, gh.size());
    EXPECT_EQ(variants(body(form, "application/x-www-form-urlencoded")),
              std::vector<std::string>{"github-pat-classic form:1+3"});

    const std::string mp = "--XB\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n" +
                           cut(aws, 0, 12) +
                           "\r\n--XB\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n" +
                           cut(aws, 12, 20) + "\r\n--XB--\r\n";
    const auto mf = body(mp, "multipart/form-data; boundary=XB");
    ASSERT_FALSE(mf.empty());
    EXPECT_EQ(mf[0].variant, "multipart:1+2");

    const std::string sse = "event: m\ndata: " + cut(gh, 0, 15) +
                            "\n\nevent: m\ndata: " + cut(gh, 15, gh.size()) + "\n\n";
    const auto sf = body(sse, "text/event-stream");
    ASSERT_FALSE(sf.empty());
    EXPECT_EQ(sf[0].variant, "sse:1+2");
}

// Found by a red-team pass: a label in front of each half ("part1: X", the shape issue 21
// names for messages) made the half a tail and the label the next head, so they never met.
TEST_F(joined_test, labelled_halves_join_in_sse_events_and_json_values) {
    const std::string sse =
        "data: part1: " + cut(gh, 0, 20) + "\n\ndata: part2: " + cut(gh, 20, gh.size()) + "\n\n";
    const auto sf = body(sse, "text/event-stream");
    ASSERT_FALSE(sf.empty());
    EXPECT_EQ(sf[0].variant, "sse:1+2");
    const std::string j = R"({"a": "first= )" + cut(aws, 0, 10) + R"(", "b": "second= )" +
                          cut(aws, 10, aws.size()) + "\"}";
    const auto jf = body(j, "application/json");
    ASSERT_FALSE(jf.empty());
    EXPECT_EQ(jf[0].variant, "json:1+2");
    // Labels alone join nothing.
    EXPECT_TRUE(body("data: part1: hello\n\ndata: part2: world\n\n", "text/event-stream").empty());
}

TEST_F(joined_test, a_base64_token_cut_over_two_fields) {
    // base64("ghp_...") split in two JSON values: joined, then decoded.
    const std::string b64 = "Z2hwX09oYlZycG9pVmdSVjVJZkxCY2Jmbm9HTWJKbVRQUzJnak51dA==";
    const std::string j = R"({"x":")" + b64.substr(0, 24) + R"(","y":")" + b64.substr(24) + "\"}";
    const auto fs = body(j, "application/json");
    ASSERT_FALSE(fs.empty());
    EXPECT_EQ(fs[0].variant, "json:1+2>base64");
}

TEST_F(joined_test, documented_limits) {
    // Four parts with junk between each: not joined (joined.hpp, "Limits"). The junk holds
    // a '-' so that the direct line does not match github-pat-classic's shape unverified.
    const std::string q = "/u?a=" + cut(gh, 0, 10) + "&j=z-1&b=" + cut(gh, 10, 20) +
                          "&k=z-2&c=" + cut(gh, 20, 30) + "&l=z-3&d=" + cut(gh, 30, gh.size());
    EXPECT_EQ(variants(url(q)), std::vector<std::string>{});
    // The same four parts next to each other are joined by the direct line.
    const std::string d = "/u?a=" + cut(gh, 0, 10) + "&b=" + cut(gh, 10, 20) +
                          "&c=" + cut(gh, 20, 30) + "&d=" + cut(gh, 30, gh.size());
    const auto fs = url(d);
    ASSERT_FALSE(fs.empty());
    EXPECT_EQ(fs[0].variant, "query:1+2+3+4");
}

TEST_F(joined_test, a_large_view_joins_neighbours_and_one_value_apart) {
    std::string j = "[";
    for (int i = 0; i < 100; ++i)
        j += "\"value" + std::to_string(i) + "\",";
    j += "\"" + cut(gh, 0, 20) + "\",\"ju-nk\",\"" + cut(gh, 20, gh.size()) + "\"]";
    const auto fs = body(j, "application/json");
    ASSERT_FALSE(fs.empty());
    EXPECT_EQ(fs[0].variant, "json:101+103");
}

TEST(seam, ends_of_json_and_of_labelled_text) {
    const auto j = ends_of(R"({"chunk": 0, "data": "AKIAIDVW", "meta": {"n": "x"}})");
    EXPECT_EQ(j.first, (std::vector<std::string>{"0", "AKIAIDVW", "x"}));
    EXPECT_EQ(j.last, (std::vector<std::string>{"0", "AKIAIDVW", "x"}));
    const auto t = ends_of("part1: AKIAIDVW\n");
    EXPECT_EQ(t.first, std::vector<std::string>{"AKIAIDVW"});
    const auto u = ends_of("one two three four five six key=\"TFKT\"");
    EXPECT_EQ(u.first, (std::vector<std::string>{"one", "two", "three", "four"}));
    EXPECT_EQ(u.last, (std::vector<std::string>{"four", "five", "six", "TFKT"}));
    EXPECT_TRUE(ends_of("  \n ").empty());
}

TEST(seam, store_keeps_for_the_ttl_and_evicts_the_oldest) {
    seam_store s;
    const auto t0 = seam_store::clock::now();
    s.keep("a", ends_of("x y"), t0);
    EXPECT_EQ(s.recent("a", t0 + std::chrono::seconds(59)).last.back(), "y");
    EXPECT_TRUE(s.recent("a", t0 + std::chrono::seconds(61)).empty());
    EXPECT_EQ(s.size(), 0u); // the stale entry went
    s.keep("a", ends_of("x y"), t0);
    s.keep("a", message_ends{}, t0); // nothing to keep: the last ends stay
    EXPECT_FALSE(s.recent("a", t0).empty());
    for (std::size_t i = 0; i < seam_entries + 10; ++i)
        s.keep("k" + std::to_string(i), ends_of("v"), t0);
    EXPECT_EQ(s.size(), seam_entries);
    EXPECT_TRUE(s.recent("a", t0).empty()); // the least recently kept went first
    EXPECT_FALSE(s.recent("k" + std::to_string(seam_entries + 9), t0).empty());
}

TEST_F(joined_test, a_seam_reports_only_what_takes_bytes_from_both_sides) {
    variant_scanner vs(*scanner_);
    std::vector<variant_finding> out;
    const auto before = ends_of("part1: " + cut(gh, 0, 18));
    const auto after = ends_of("part2: " + cut(gh, 18, gh.size()));
    ASSERT_EQ(vs.scan_seam(before, after, "ws:message:2", out), variant_status::ok);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].variant, "seam:1+2");
    EXPECT_EQ(out[0].location, "ws:message:2");
    // A whole token at the end of the first message was that message's: not reported
    // again, neither alone nor glued to the next word as a longer look-alike.
    out.clear();
    ASSERT_EQ(vs.scan_seam(ends_of(std::string("use ") + std::string(gh)), ends_of("nothing here"),
                           "body", out),
              variant_status::ok);
    EXPECT_TRUE(out.empty()) << out[0].f.rule_id << " " << out[0].variant;
    // Either side empty: nothing to do.
    EXPECT_EQ(vs.scan_seam({}, after, "body", out), variant_status::ok);
    EXPECT_TRUE(out.empty());
}

TEST_F(joined_test, scan_body_leaves_the_decoded_bodys_ends) {
    variant_scanner vs(*scanner_);
    std::vector<variant_finding> out;
    ASSERT_EQ(
        vs.scan_body("a=1&b=" + cut(aws, 0, 10), "application/x-www-form-urlencoded", {}, out),
        variant_status::ok);
    EXPECT_EQ(vs.ends().last.back(), cut(aws, 0, 10));
    vs.reset();
    EXPECT_TRUE(vs.ends().empty());
}
