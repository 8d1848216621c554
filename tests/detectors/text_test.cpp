#include "sluice/detectors/text.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using namespace sluice;

TEST(text, hex_of_every_byte_value) {
    std::string all;
    for (int i = 0; i < 256; ++i) {
        all.push_back(static_cast<char>(i));
    }
    const std::string lo = text::to_hex(all);
    const std::string up = text::to_hex(all, /*upper=*/true);
    ASSERT_EQ(lo.size(), 512u);
    EXPECT_EQ(lo.substr(0, 6), "000102");
    EXPECT_EQ(lo.substr(506), "fdfeff");
    EXPECT_EQ(up.substr(506), "FDFEFF");
    std::string appended = "x";
    text::append_hex(appended, "\x7f\x80");
    EXPECT_EQ(appended, "x7f80");
}

TEST(text, ascii_case_and_whitespace) {
    EXPECT_TRUE(text::iequals("Content-Type", "content-TYPE"));
    EXPECT_FALSE(text::iequals("abc", "abd"));
    EXPECT_FALSE(text::iequals("abc", "abcd"));
    // Bytes >= 0x80 are compared as they are: no locale folds them.
    EXPECT_FALSE(text::iequals("\xc3\x84", "\xc3\xa4"));
    EXPECT_EQ(text::lower("GitHub-PAT \xc3\x84"), "github-pat \xc3\x84");
    EXPECT_EQ(text::trim(" \t Bearer x \t"), "Bearer x");
    EXPECT_EQ(text::trim(" \t "), "");
    EXPECT_EQ(text::str_cat("rule ", std::string("a"), ": line ", 7), "rule a: line 7");
}

} // namespace
