#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/embedded_rules.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace {

using namespace sluice;

TEST(rules_loader, parses_the_schema) {
    const auto rules = config::load_rules_string(R"(rules:
  - id: demo
    name: Demo token
    category: test
    pattern: '\bdemo_[a-z]{8}\b'
    keywords: [demo_]
    validator: entropy
    confidence: 0.5
    max_width: 64
    references: [https://example.com/format]
    examples: ['demo_abcdefgh']
    negative_examples: ['demo_abc']
)",
                                                 "t.yml");
    ASSERT_TRUE(rules.has_value());
    ASSERT_EQ(rules->size(), 1u);
    const auto& r = rules->front();
    EXPECT_EQ(r.id, "demo");
    EXPECT_EQ(r.pattern, "\\bdemo_[a-z]{8}\\b");
    EXPECT_EQ(r.keywords.size(), 1u);
    EXPECT_EQ(r.validator, "entropy");
    EXPECT_DOUBLE_EQ(r.confidence, 0.5);
    EXPECT_EQ(r.max_width, 64u);
    EXPECT_EQ(r.examples.size(), 1u);
    EXPECT_EQ(r.negative_examples.size(), 1u);
}

TEST(rules_loader, every_problem_has_file_line_column) {
    const auto rules = config::load_rules_string(R"(rules:
  - id: a
    name: A
    category: test
    pattern: 'a+b'
    colour: red
  - id: a
    name: A again
    category: test
    pattern: 'x'
  - name: no id
    pattern: 'y'
    category: test
  - id: c
    name: C
    category: test
    pattern: 'z'
    confidence: 7
)",
                                                 "bad.yml");
    ASSERT_FALSE(rules.has_value());
    const auto& d = rules.error();
    ASSERT_EQ(d.size(), 4u);
    EXPECT_EQ(d[0].file, "bad.yml");
    EXPECT_EQ(d[0].line, 6);
    EXPECT_EQ(d[0].column, 5);
    EXPECT_NE(d[0].message.find("colour"), std::string::npos);
    EXPECT_EQ(d[1].line, 7);
    EXPECT_NE(d[1].message.find("duplicate"), std::string::npos);
    EXPECT_EQ(d[2].line, 11);
    EXPECT_NE(d[2].message.find("missing id"), std::string::npos);
    EXPECT_EQ(d[3].line, 18);
}

TEST(rules_loader, syntax_error_has_position) {
    const auto rules = config::load_rules_string("rules:\n  - id: [unclosed\n", "syn.yml");
    ASSERT_FALSE(rules.has_value());
    EXPECT_EQ(rules.error()[0].file, "syn.yml");
    EXPECT_GE(rules.error()[0].line, 2);
}

TEST(rules_loader, top_level_shape) {
    EXPECT_FALSE(config::load_rules_string("hello", "s.yml").has_value());
    EXPECT_FALSE(config::load_rules_string("rules: 3", "s.yml").has_value());
    EXPECT_FALSE(config::load_rules_string("rules: []\nextra: 1", "s.yml").has_value());
    EXPECT_TRUE(config::load_rules_string("rules: []", "s.yml").has_value());
}

TEST(rules_loader, file_and_builtin) {
    const auto dir = std::filesystem::temp_directory_path() / "sluice_rules_loader_test";
    std::filesystem::create_directories(dir);
    {
        std::ofstream(dir / "r.yml")
            << "rules:\n  - id: f\n    name: F\n    category: t\n    pattern: 'f[0-9]{3}'\n";
    }
    const auto rules = config::load_rules_file(dir / "r.yml");
    ASSERT_TRUE(rules.has_value());
    EXPECT_EQ(rules->front().id, "f");
    const auto missing = config::load_rules_file(dir / "missing.yml");
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.error()[0].file.find("missing.yml"), std::string::npos);
    std::filesystem::remove_all(dir);

    const auto builtin = config::builtin_rules();
    ASSERT_TRUE(builtin.has_value());
    EXPECT_FALSE(detectors::embedded_rule_files().empty());
    std::size_t from_files = 0;
    for (const auto& f : detectors::embedded_rule_files()) {
        const auto one = config::load_rules_string(f.text, f.name);
        ASSERT_TRUE(one.has_value()) << f.name;
        from_files += one->size();
    }
    EXPECT_EQ(builtin->size(), from_files);
}

} // namespace
