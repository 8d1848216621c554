// dlp::body_stream: a body relayed window by window. A token in a compressed stream
// (declared by Content-Encoding, or recognised by its magic anywhere in the raw bytes)
// is found before the raw bytes that carry it are released, whatever the window size;
// a malformed declared coding is 400 bad_encoding; a clean body is released whole.
#include "variants/coders.hpp"

#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/body_stream.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <optional>

using namespace sluice;
using namespace sluice::dlp;
namespace tc = sluice::test_coders;

namespace {

using dlp::test::builtin;

std::string token() {
    return dlp::test::rule_example("github-pat-classic");
}

// Text that compresses but not to nothing: numbered log lines.
std::string text(std::size_t bytes) {
    std::string s;
    for (unsigned k = 0; s.size() < bytes; ++k)
        s += "2026-12-01 event " + std::to_string(k * 2654435761u % 100000) + " ok\n";
    s.resize(bytes);
    return s;
}

struct outcome {
    verdict v;                         // the last verdict (deny, or forward at the end)
    std::uint64_t released = 0;        // releasable when the stream stopped
    std::uint64_t released_before = 0; // releasable before the denying feed
    std::string variants;
};

class body_stream_test : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(builtin(), nullptr);
        scanner_.emplace(builtin());
        tok_ = token();
        ASSERT_FALSE(tok_.empty());
    }
    outcome run(std::string_view ce, std::string_view body, std::size_t step,
                std::size_t window = 64 * 1024) {
        body_stream bs(pol_, *scanner_, {}, ce, window, 8 * 1024);
        outcome o;
        for (std::size_t i = 0; i < body.size() || i == 0; i += step) {
            const bool last = i + step >= body.size();
            auto r = bs.feed(body.substr(i, std::min(step, body.size() - i)), last);
            for (const auto& f : r.v.findings)
                o.variants += f.variant + " ";
            EXPECT_GE(r.releasable, o.released);
            if (r.v.kind != verdict_kind::forward) {
                o.v = r.v;
                o.released_before = o.released;
                return o;
            }
            o.released = r.releasable;
            o.v = r.v;
            if (last)
                break;
        }
        return o;
    }

    policy pol_;
    std::optional<detectors::scanner> scanner_;
    std::string tok_;
};

} // namespace

TEST_F(body_stream_test, gzip_without_content_encoding_after_other_bytes) {
    const std::string before = text(300 * 1024);
    const std::string gz = tc::gzip(text(200 * 1024) + tok_ + "\n" + text(1000));
    const std::string body = before + gz + text(100 * 1024);
    for (const std::size_t step : {4096u, 64u * 1024}) {
        auto o = run("", body, step);
        EXPECT_EQ(o.v.status, 403) << step;
        EXPECT_EQ(o.v.reason, "dlp_finding") << step;
        EXPECT_NE(o.variants.find("gzip"), std::string::npos) << o.variants;
        // Nothing past the start of the compressed token's stream was released.
        EXPECT_LE(o.released_before, before.size() + gz.size()) << step;
    }
}

TEST_F(body_stream_test, declared_codings_are_decoded_across_windows) {
    const std::string plain = text(700 * 1024) + tok_ + "\n" + text(3000);
    for (const auto& [ce, data] :
         std::vector<std::pair<std::string, std::string>>{{"gzip", tc::gzip(plain)},
                                                          {"deflate", tc::zlib(plain)},
                                                          {"br", tc::brotli(plain)},
                                                          {"zstd", tc::zstd(plain)}}) {
        ASSERT_EQ(data.find(tok_), std::string::npos) << ce;
        for (const std::size_t step : {1000u, 64u * 1024}) {
            auto o = run(ce, data, step);
            EXPECT_EQ(o.v.status, 403) << ce << " step " << step;
            EXPECT_EQ(o.v.reason, "dlp_finding") << ce;
            EXPECT_LT(o.released_before, data.size()) << ce;
        }
    }
}

TEST_F(body_stream_test, clean_bodies_are_released_whole) {
    const std::string plain = text(900 * 1024);
    for (const auto& [ce, data] :
         std::vector<std::pair<std::string, std::string>>{{"", plain},
                                                          {"gzip", tc::gzip(plain)},
                                                          {"zstd", tc::zstd(plain)},
                                                          {"br", tc::brotli(plain)}}) {
        auto o = run(ce, data, 64 * 1024);
        EXPECT_EQ(o.v.kind, verdict_kind::forward) << ce << " " << o.v.reason;
        EXPECT_EQ(o.released, data.size()) << ce;
    }
}

TEST_F(body_stream_test, malformed_declared_coding_is_bad_encoding) {
    const std::string gz = tc::gzip(text(300 * 1024));
    auto cut = run("gzip", std::string_view(gz).substr(0, gz.size() - 100), 64 * 1024);
    EXPECT_EQ(cut.v.status, 400);
    EXPECT_EQ(cut.v.reason, "bad_encoding");
    auto junk = run("gzip", "not a gzip stream at all, just text" + text(100 * 1024), 64 * 1024);
    EXPECT_EQ(junk.v.status, 400);
    EXPECT_EQ(junk.v.reason, "bad_encoding");
    EXPECT_FALSE(body_stream::can_stream("gzip, br"));
    EXPECT_FALSE(body_stream::can_stream("lzma"));
    EXPECT_TRUE(body_stream::can_stream("GZIP"));
    EXPECT_TRUE(body_stream::can_stream(""));
}

TEST_F(body_stream_test, token_in_trailing_bytes_of_a_declared_stream) {
    const std::string data = tc::gzip(text(200 * 1024)) + "\n" + tok_ + "\n";
    auto o = run("gzip", data, 64 * 1024);
    EXPECT_EQ(o.v.status, 403);
    EXPECT_EQ(o.v.reason, "dlp_finding");
}
