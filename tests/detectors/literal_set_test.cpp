// literal_set: exact strings in one Hyperscan pass, sharing the thread's scratch with the
// rules scanner; case folding, single reports, overlaps, early stop, bad input, threads.
#include "sluice/detectors/literal_set.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace sluice::detectors;
using hits = std::vector<std::pair<unsigned, std::size_t>>; // id, end

hits all_hits(const literal_set& set, std::string_view text) {
    hits out;
    EXPECT_TRUE(set.scan(text, [&](unsigned id, std::size_t end) {
        out.emplace_back(id, end);
        return 0;
    }));
    return out;
}

std::shared_ptr<const literal_set> compiled(std::vector<std::string> lits,
                                            literal_set::options o = {}) {
    auto s = literal_set::compile(lits, o);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error());
    return s ? *s : nullptr;
}

TEST(literal_set, reports_every_overlapping_match_by_end_and_bytes_exactly) {
    const std::string nul("a\0b", 3);
    auto set = compiled({"abab", "bab", nul});
    ASSERT_TRUE(set);
    EXPECT_EQ(all_hits(*set, "xababab"), (hits{{0, 5}, {1, 5}, {0, 7}, {1, 7}}));
    EXPECT_EQ(all_hits(*set, std::string("--a\0b--", 7)), (hits{{2, 5}}));
    EXPECT_TRUE(all_hits(*set, "ABAB a b").empty()); // case matters by default
    EXPECT_TRUE(all_hits(*set, "").empty());
}

TEST(literal_set, caseless_and_first_only) {
    auto folded = compiled({"Secret"}, {.caseless = true});
    ASSERT_TRUE(folded);
    EXPECT_EQ(all_hits(*folded, "SECRET secret sEcReT"), (hits{{0, 6}, {0, 13}, {0, 20}}));
    auto once = compiled({"Secret"}, {.first_only = true});
    ASSERT_TRUE(once);
    EXPECT_EQ(all_hits(*once, "Secret Secret"), (hits{{0, 6}}));
}

TEST(literal_set, a_callback_can_stop_the_scan) {
    auto set = compiled({"ab"});
    ASSERT_TRUE(set);
    int calls = 0;
    EXPECT_TRUE(set->scan("ab ab ab", [&](unsigned, std::size_t) { return ++calls == 2; }));
    EXPECT_EQ(calls, 2);
}

TEST(literal_set, an_empty_literal_is_an_error_naming_no_bytes_and_an_empty_list_matches_nothing) {
    auto bad = literal_set::compile({"hunter2-value", ""}, {});
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error(), "literal #2 is empty");
    auto none = compiled({});
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());
    EXPECT_TRUE(all_hits(*none, "anything").empty());
}

// One thread's scratch serves the rules and several literal sets in turn, and the
// sets made after others were freed (new serials) are fitted again.
TEST(literal_set, one_thread_scratch_serves_rules_and_sets_in_turn) {
    rule r;
    r.id = r.name = "t";
    r.category = "test";
    r.pattern = "tok_[0-9]{6}";
    auto rs = ruleset::compile({r});
    ASSERT_TRUE(rs.has_value());
    scanner sc(*rs);
    for (int round = 0; round < 20; ++round) {
        auto small = compiled({"needle"});
        std::vector<std::string> many;
        for (int i = 0; i < 300; ++i)
            many.push_back("literal-number-" + std::to_string(i) + "-x");
        auto big = compiled(many, {.caseless = true});
        ASSERT_TRUE(small && big);
        std::vector<finding> out;
        ASSERT_TRUE(sc.scan("a tok_123456 b", out));
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(all_hits(*small, "hay needle hay"), (hits{{0, 10}}));
        EXPECT_EQ(all_hits(*big, "LITERAL-NUMBER-299-X"), (hits{{299, 20}}));
    }
}

TEST(literal_set, threads_scan_one_set_at_once) {
    auto set = compiled({"needle", "haystack"});
    ASSERT_TRUE(set);
    std::string text;
    for (int i = 0; i < 2000; ++i)
        text += i % 7 ? "haystack " : "needle ";
    std::vector<std::size_t> counts(4);
    std::vector<std::thread> ts;
    for (std::size_t t = 0; t < counts.size(); ++t)
        ts.emplace_back([&, t] {
            for (int k = 0; k < 20; ++k)
                counts[t] += all_hits(*set, text).size();
        });
    for (auto& t : ts)
        t.join();
    for (auto c : counts)
        EXPECT_EQ(c, 20u * 2000u);
}

} // namespace
