// The engine on hand-written rules: confirmation windows, capture groups, dedupe,
// prefilter fallback, compile errors, empty and binary input, and stream feeds.
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/detectors/stream_scanner.hpp"

#include <gtest/gtest.h>

#include <random>

namespace {

using namespace sluice::detectors;

rule make(std::string id, std::string pattern, std::string validator = "") {
    rule r;
    r.id = std::move(id);
    r.name = r.id;
    r.category = "test";
    r.pattern = std::move(pattern);
    r.validator = std::move(validator);
    return r;
}

std::shared_ptr<const ruleset> compile_ok(std::vector<rule> rules) {
    auto rs = ruleset::compile(std::move(rules));
    if (!rs) {
        for (const auto& e : rs.error())
            ADD_FAILURE() << e;
        return nullptr;
    }
    return *rs;
}

TEST(ruleset, compile_errors_name_the_rule) {
    EXPECT_FALSE(ruleset::compile({}).has_value());

    auto bad = ruleset::compile({make("ok", "abc[0-9]{4}"), make("broken", "abc(")});
    ASSERT_FALSE(bad.has_value());
    ASSERT_EQ(bad.error().size(), 1u);
    EXPECT_NE(bad.error()[0].find("broken"), std::string::npos);

    auto dup = ruleset::compile({make("same", "abc"), make("same", "def")});
    ASSERT_FALSE(dup.has_value());
    EXPECT_NE(dup.error()[0].find("duplicate"), std::string::npos);

    auto empty = ruleset::compile({make("empty", "a*")});
    ASSERT_FALSE(empty.has_value());
    EXPECT_NE(empty.error()[0].find("empty"), std::string::npos);

    auto validator = ruleset::compile({make("v", "abc", "no-such-validator")});
    ASSERT_FALSE(validator.has_value());
    EXPECT_NE(validator.error()[0].find("no-such-validator"), std::string::npos);

    // A back-reference is RE2-invalid as well, so it is an error, not a prefilter.
    EXPECT_FALSE(ruleset::compile({make("backref", "(a)\\1")}).has_value());
}

TEST(ruleset, widths_come_from_the_pattern) {
    auto rs = compile_ok({make("a", "tok_[a-z]{10}"), make("b", "key=[0-9]{4,32}")});
    ASSERT_TRUE(rs);
    EXPECT_EQ(rs->max_width(), 36u);
    EXPECT_GE(rs->compile_ms(), 0.0);
    rule wide = make("c", "BEGIN[^E]+END");
    auto unbounded = compile_ok({wide});
    ASSERT_TRUE(unbounded);
    EXPECT_EQ(unbounded->max_width(), 4096u);
    wide.max_width = 100;
    auto capped = compile_ok({wide});
    ASSERT_TRUE(capped);
    EXPECT_EQ(capped->max_width(), 100u);
}

TEST(scanner, empty_input_and_no_hits) {
    auto rs = compile_ok({make("tok", "\\btok_[a-z]{10}\\b")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::vector<finding> out;
    EXPECT_TRUE(s.scan("", out));
    EXPECT_TRUE(s.scan("nothing to see here", out));
    EXPECT_TRUE(out.empty());
}

TEST(scanner, capture_group_marks_the_secret_and_offsets_are_exact) {
    auto rs = compile_ok({make("kv", "api_key=\"([a-z0-9]{8})\"")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::vector<finding> out;
    const std::string text = "xx api_key=\"abcd1234\" yy api_key=\"zzzz9999\"";
    ASSERT_TRUE(s.scan(text, out));
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(text.substr(out[0].begin, out[0].end - out[0].begin), "abcd1234");
    EXPECT_EQ(text.substr(out[1].begin, out[1].end - out[1].begin), "zzzz9999");
    EXPECT_EQ(out[0].fingerprint, fingerprint("abcd1234"));
    EXPECT_EQ(out[0].rule_id, "kv");
    EXPECT_EQ(out[0].category, "test");
}

TEST(scanner, word_boundary_sees_context_before_the_window) {
    // The window starts exactly at "tok_"; the byte before it is a word character, so
    // \b must fail even though RE2 starts its search there.
    auto rs = compile_ok({make("tok", "\\btok_[a-z]{10}\\b")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::vector<finding> out;
    ASSERT_TRUE(s.scan("xtok_abcdefghij", out));
    EXPECT_TRUE(out.empty());
    ASSERT_TRUE(s.scan(" tok_abcdefghij", out));
    EXPECT_EQ(out.size(), 1u);
}

TEST(scanner, overlapping_ends_of_one_rule_are_one_finding) {
    // Without a trailing boundary Hyperscan reports every end from 8 to 16.
    auto rs = compile_ok({make("run", "key-[a-f]{8,16}")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::vector<finding> out;
    const std::string text = "key-abcdefabcdefab!";
    ASSERT_TRUE(s.scan(text, out));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].begin, 0u);
    EXPECT_EQ(out[0].end, 18u); // "key-" + the 14-letter run
}

TEST(scanner, open_ended_runs_give_one_longest_finding_each) {
    // Hyperscan reports every end from 32 to 400 characters after each "tok_"; the
    // engine confirms only the end of each run and reports the longest match.
    auto rs = compile_ok({make("open", "tok_[a-z]{32,400}")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::string text;
    for (int i = 0; i < 200; ++i) {
        text += "tok_" + std::string(300 + i % 50, static_cast<char>('a' + i % 26)) + ' ';
    }
    std::vector<finding> out;
    ASSERT_TRUE(s.scan(text, out));
    ASSERT_EQ(out.size(), 200u);
    std::size_t at = 0;
    for (int i = 0; i < 200; ++i) {
        EXPECT_EQ(out[i].begin, at);
        EXPECT_EQ(out[i].end - out[i].begin, 4u + 300u + static_cast<std::size_t>(i % 50));
        at = out[i].end + 1;
    }
}

TEST(scanner, validator_filters_confirmed_hits) {
    auto rs = compile_ok({make("card", "\\b[0-9]{16}\\b", "luhn")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::vector<finding> out;
    ASSERT_TRUE(s.scan("4111111111111111 4111111111111112", out));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].begin, 0u);
}

TEST(scanner, binary_input_is_scanned_bytewise) {
    auto rs = compile_ok(
        {make("tok", "\\btok_[a-z]{10}\\b"), make("bin", "\\x00\\xffMAGIC[\\x80-\\xff]{4}")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::mt19937 rng(1);
    std::string data(1 << 16, '\0');
    for (auto& c : data)
        c = static_cast<char>(rng() & 0xff);
    const std::string needle = std::string("\0\xffMAGIC\x80\x81\x82\x83", 11);
    data.replace(1000, needle.size(), needle);
    data.replace(5000, 16, " tok_abcdefghij ");
    std::vector<finding> out;
    ASSERT_TRUE(s.scan(data, out));
    ASSERT_GE(out.size(), 2u);
    bool bin = false, tok = false;
    for (const auto& f : out) {
        bin = bin || (f.rule_id == "bin" && f.begin == 1000 && f.end == 1011);
        tok = tok || (f.rule_id == "tok" && f.begin == 5001 && f.end == 5015);
    }
    EXPECT_TRUE(bin);
    EXPECT_TRUE(tok);
}

TEST(scanner, prefilter_rule_is_confirmed_by_re2) {
    // A huge bounded repeat inside alternation is beyond Hyperscan's limits in many
    // builds; whichever path is taken, RE2 must keep the result exact.
    auto rs = compile_ok({make("big", "(?:x[a-z]{1,900}y|q[0-9]{3})z")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    std::vector<finding> out;
    ASSERT_TRUE(s.scan("..xabcyz..q123z..q12z..", out));
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].begin, 2u);
    EXPECT_EQ(out[1].begin, 10u);
}

TEST(stream_scanner, finds_secret_split_at_every_offset_and_reports_once) {
    auto rs = compile_ok({make("tok", "\\btok_[a-z]{10,20}\\b")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    const std::string text = "prefix tok_abcdefghijklmno suffix";
    for (std::size_t a = 0; a <= text.size(); ++a) {
        for (std::size_t b = a; b <= text.size(); ++b) {
            stream_scanner st(s);
            std::vector<finding> out;
            ASSERT_TRUE(st.feed(std::string_view(text).substr(0, a), out));
            ASSERT_TRUE(st.feed(std::string_view(text).substr(a, b - a), out));
            ASSERT_TRUE(st.feed(std::string_view(text).substr(b), out));
            ASSERT_TRUE(st.finish(out));
            ASSERT_EQ(out.size(), 1u) << a << ' ' << b;
            EXPECT_EQ(out[0].begin, 7u);
            EXPECT_EQ(out[0].end, 26u);
        }
    }
}

TEST(stream_scanner, offsets_are_relative_to_the_stream) {
    auto rs = compile_ok({make("tok", "\\btok_[a-z]{10}\\b")});
    ASSERT_TRUE(rs);
    scanner s(rs);
    stream_scanner st(s);
    std::vector<finding> out;
    const std::string filler(10000, '.');
    ASSERT_TRUE(st.feed(filler, out));
    ASSERT_TRUE(st.feed(" tok_abcdefghij ", out));
    ASSERT_TRUE(st.feed(filler, out));
    ASSERT_TRUE(st.finish(out));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].begin, 10001u);
    EXPECT_EQ(st.offset(), 20016u);
    st.reset();
    EXPECT_EQ(st.offset(), 0u);
}

} // namespace
