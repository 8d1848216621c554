// A Hyperscan database loaded from a snapshot finds exactly what a fresh compile finds, and
// a snapshot that does not fit (other rules, another key, platform or Hyperscan, damaged
// bytes) is ignored: the rules are compiled instead and still find the same.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace sluice;
using detectors::database_snapshot;
using detectors::rule;
using detectors::ruleset;

auto as_tuple(const detectors::finding& f) {
    return std::tie(f.rule_id, f.category, f.begin, f.end, f.confidence, f.fingerprint);
}

// Every finding of both rulesets on every input, compared field by field.
void expect_same_findings(const std::shared_ptr<const ruleset>& a,
                          const std::shared_ptr<const ruleset>& b,
                          const std::vector<std::string>& inputs) {
    ASSERT_TRUE(a && b);
    detectors::scanner sa(a), sb(b);
    std::vector<detectors::finding> fa, fb;
    std::size_t total = 0;
    for (const auto& in : inputs) {
        fa.clear();
        fb.clear();
        ASSERT_TRUE(sa.scan(in, fa));
        ASSERT_TRUE(sb.scan(in, fb));
        ASSERT_EQ(fa.size(), fb.size()) << "input: " << in;
        for (std::size_t i = 0; i < fa.size(); ++i)
            EXPECT_TRUE(as_tuple(fa[i]) == as_tuple(fb[i]))
                << fa[i].rule_id << " vs " << fb[i].rule_id << " in: " << in;
        total += fa.size();
    }
    EXPECT_GT(total, 0u); // the inputs exercise the rules, not only their absence
}

// Each example and negative example alone and in surrounding text, and all of them in
// one buffer, so hits of different rules meet in one scan.
std::vector<std::string> example_inputs(std::span<const rule> rules) {
    std::vector<std::string> inputs;
    std::string all;
    for (const auto& r : rules) {
        for (const auto* list : {&r.examples, &r.negative_examples}) {
            for (const auto& ex : *list) {
                inputs.push_back(ex);
                inputs.push_back("{\"payload\": 1}\n" + ex + "\n<!-- end -->");
                all += ex;
                all += '\n';
            }
        }
    }
    inputs.push_back(all);
    return inputs;
}

std::shared_ptr<const ruleset> compile_ok(std::vector<rule> rules,
                                          const database_snapshot* snapshot = nullptr) {
    auto rs = ruleset::compile(std::move(rules), snapshot);
    if (!rs) {
        for (const auto& e : rs.error())
            ADD_FAILURE() << e;
        return nullptr;
    }
    return *rs;
}

TEST(builtin_snapshot, loads_on_the_build_machine_and_finds_what_a_fresh_compile_finds) {
    const database_snapshot embedded = config::builtin_database_snapshot();
#if SLUICE_RULES_SNAPSHOT
    // The tests run where the build ran, so the embedded database fits this machine.
    ASSERT_FALSE(embedded.database.empty());
#else
    ASSERT_TRUE(embedded.database.empty());
#endif
    auto rules = config::builtin_rules();
    ASSERT_TRUE(rules.has_value());
    const auto inputs = example_inputs(*rules);

    const auto fresh = compile_ok(*rules);
    ASSERT_TRUE(fresh);
    EXPECT_FALSE(fresh->database_from_snapshot());
    const auto shared = config::builtin_ruleset();
    ASSERT_TRUE(shared.has_value());
    EXPECT_EQ((*shared)->database_from_snapshot(), !embedded.database.empty());
    EXPECT_EQ(config::builtin_ruleset().value_or(nullptr), *shared); // one per process
    expect_same_findings(fresh, *shared, inputs);

    if (embedded.database.empty())
        return;
    // The generator and this process agree on the key and the final prefilter flags.
    const auto saved = fresh->save();
    ASSERT_TRUE(saved.has_value()) << saved.error();
    EXPECT_EQ(saved->key, embedded.key);
    EXPECT_TRUE(std::ranges::equal(saved->prefilter, embedded.prefilter));
    EXPECT_EQ(saved->platform, embedded.platform);
}

// Hand-written rules keep these cheap: each fallback is a full Hyperscan compile.
std::vector<rule> small_rules() {
    auto make = [](std::string id, std::string pattern, std::vector<std::string> examples) {
        rule r;
        r.id = std::move(id);
        r.name = r.id;
        r.category = "test";
        r.pattern = std::move(pattern);
        r.examples = std::move(examples);
        return r;
    };
    return {
        make("tok", "tok_[a-z]{10}\\b", {"x tok_abcdefghij y"}),
        make("key", "key=([0-9]{4,32})", {"key=123456", "key=1234 key=99999"}),
        make("pem", "-----BEGIN (?:RSA|EC) KEY-----", {"a -----BEGIN EC KEY----- b"}),
    };
}

TEST(ruleset_snapshot, save_then_compile_loads_the_database) {
    const auto fresh = compile_ok(small_rules());
    ASSERT_TRUE(fresh);
    const auto saved = fresh->save();
    ASSERT_TRUE(saved.has_value()) << saved.error();
    EXPECT_FALSE(saved->database.empty());
    EXPECT_EQ(saved->prefilter.size(), 3u);
    const auto view = saved->view();
    const auto loaded = compile_ok(small_rules(), &view);
    ASSERT_TRUE(loaded);
    EXPECT_TRUE(loaded->database_from_snapshot());
    EXPECT_EQ(loaded->max_width(), fresh->max_width());
    const auto again = loaded->save();
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->key, saved->key);
    EXPECT_EQ(again->prefilter, saved->prefilter);
    expect_same_findings(fresh, loaded, example_inputs(small_rules()));
}

// Each way a snapshot can fail to fit: compile() ignores it and the result still finds
// exactly what a fresh compile of the same rules finds.
TEST(ruleset_snapshot, a_snapshot_that_does_not_fit_falls_back_to_compiling) {
    const auto fresh = compile_ok(small_rules());
    ASSERT_TRUE(fresh);
    const auto saved = fresh->save();
    ASSERT_TRUE(saved.has_value()) << saved.error();

    struct variant {
        std::string what;
        std::vector<rule> rules;
        detectors::saved_database snapshot;
        bool rules_changed = false;
    };
    std::vector<variant> variants;
    auto add = [&](std::string what, auto change_rules, auto change_snapshot) {
        variant v{std::move(what), small_rules(), *saved};
        change_rules(v.rules);
        change_snapshot(v.snapshot);
        v.rules_changed = v.rules.size() != small_rules().size() ||
                          !std::ranges::equal(v.rules, small_rules(), [](auto& a, auto& b) {
                              return a.id == b.id && a.pattern == b.pattern;
                          });
        variants.push_back(std::move(v));
    };
    auto same_rules = [](std::vector<rule>&) {};
    auto same_snapshot = [](detectors::saved_database&) {};

    add("another key", same_rules, [](auto& s) { s.key[7] ^= 0x01; });
    add("another CPU", same_rules, [](auto& s) { s.platform.cpu_features ^= 0x4; });
    add("another tuning", same_rules, [](auto& s) { s.platform.tune += 1; });
    add("truncated database", same_rules,
        [](auto& s) { s.database.resize(s.database.size() / 2); });
    add("no database", same_rules, [](auto& s) { s.database.clear(); });
    add("other prefilter flags", same_rules, [](auto& s) { s.prefilter[0] ^= 1; });
    add("a flag per rule missing", same_rules, [](auto& s) { s.prefilter.pop_back(); });
    add(
        "a rule added (built-in plus user rules)",
        [](auto& r) {
            rule extra = r.front();
            extra.id = "user";
            extra.pattern = "usr_[0-9]{6}";
            extra.examples = {"usr_123456"};
            r.push_back(extra);
        },
        same_snapshot);
    add(
        "a pattern changed", [](auto& r) { r[0].pattern = "tok_[a-z]{11}\\b"; }, same_snapshot);
    add(
        "an id changed", [](auto& r) { r[1].id = "key2"; }, same_snapshot);
    add(
        "rules reordered", [](auto& r) { std::swap(r[0], r[1]); }, same_snapshot);
    add(
        "a rule removed", [](auto& r) { r.pop_back(); }, same_snapshot);

    for (const auto& v : variants) {
        SCOPED_TRACE(v.what);
        const auto view = v.snapshot.view();
        const auto with = compile_ok(v.rules, &view);
        ASSERT_TRUE(with);
        EXPECT_FALSE(with->database_from_snapshot());
        expect_same_findings(v.rules_changed ? compile_ok(v.rules) : fresh, with,
                             example_inputs(v.rules));
    }
    EXPECT_EQ(std::ranges::count_if(variants, [](auto& v) { return v.rules_changed; }), 5);
}

TEST(ruleset_snapshot, rule_errors_are_reported_whatever_the_snapshot) {
    const auto saved = compile_ok(small_rules())->save();
    ASSERT_TRUE(saved.has_value());
    auto rules = small_rules();
    rules[2].validator = "no-such-validator";
    const auto view = saved->view();
    const auto rs = ruleset::compile(rules, &view);
    ASSERT_FALSE(rs.has_value());
    EXPECT_NE(rs.error().front().find("pem"), std::string::npos);
}

} // namespace
