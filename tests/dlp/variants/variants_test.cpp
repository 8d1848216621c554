// The variant pipeline over the real compiled built-in rules: planted tokens (each rule's
// own first example, so nothing here depends on a string the test invents) under every
// wrapping and every pair of wrappings, in each location the inspector sees; benign
// look-alikes that must pass; a gzip bomb that must be refused with bounded memory.
// Encoders here are the inverse operations, built on zlib and plain byte arithmetic.
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/finding.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/decode.hpp"
#include "sluice/dlp/inspector.hpp"
#include "sluice/dlp/variants.hpp"

#include <brotli/encode.h>
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <sys/resource.h>

#include <cstdio>
#include <functional>
#include <map>
#include <random>

using namespace sluice;
using namespace sluice::dlp;

namespace {

std::shared_ptr<const detectors::ruleset> builtin() {
    auto rules = config::builtin_ruleset();
    EXPECT_TRUE(rules.has_value());
    return rules.value_or(nullptr);
}

std::string first_example(std::string_view rule_id) {
    const auto rules = builtin();
    if (!rules)
        return {};
    for (const auto& r : rules->rules())
        if (r.id == rule_id && !r.examples.empty())
            return r.examples.front();
    return {};
}

// ---- encoders (the inverses of the decoders under test) ---------------------------------

std::string b64(std::string_view in, bool url, bool pad, std::size_t wrap = 0) {
    static constexpr char std_a[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static constexpr char url_a[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char* a = url ? url_a : std_a;
    std::string out;
    std::size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                           (static_cast<unsigned char>(in[i + 1]) << 8) |
                           static_cast<unsigned char>(in[i + 2]);
        out += a[(v >> 18) & 63];
        out += a[(v >> 12) & 63];
        out += a[(v >> 6) & 63];
        out += a[v & 63];
    }
    if (in.size() - i == 1) {
        const unsigned v = static_cast<unsigned char>(in[i]) << 16;
        out += a[(v >> 18) & 63];
        out += a[(v >> 12) & 63];
        if (pad)
            out += "==";
    } else if (in.size() - i == 2) {
        const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                           (static_cast<unsigned char>(in[i + 1]) << 8);
        out += a[(v >> 18) & 63];
        out += a[(v >> 12) & 63];
        out += a[(v >> 6) & 63];
        if (pad)
            out += '=';
    }
    if (wrap == 0)
        return out;
    std::string wrapped;
    for (std::size_t p = 0; p < out.size(); p += wrap) {
        if (p)
            wrapped += "\r\n";
        wrapped += out.substr(p, wrap);
    }
    return wrapped;
}

std::string hexenc(std::string_view in, std::string_view sep, std::string_view pre = {}) {
    static constexpr char h[] = "0123456789abcdef";
    std::string out;
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (i)
            out += sep;
        out += pre;
        out += h[static_cast<unsigned char>(in[i]) >> 4];
        out += h[static_cast<unsigned char>(in[i]) & 15];
    }
    return out;
}

std::string pct_all(std::string_view in) {
    static constexpr char h[] = "0123456789ABCDEF";
    std::string out;
    for (const char c : in) {
        out += '%';
        out += h[static_cast<unsigned char>(c) >> 4];
        out += h[static_cast<unsigned char>(c) & 15];
    }
    return out;
}

// application/x-www-form-urlencoded / query value encoding of arbitrary bytes.
std::string form_enc(std::string_view in) {
    static constexpr char h[] = "0123456789ABCDEF";
    std::string out;
    for (const char ch : in) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            out += ch;
        } else {
            out += '%';
            out += h[c >> 4];
            out += h[c & 15];
        }
    }
    return out;
}

void utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Code points of well-formed UTF-8 (the test's own inputs).
std::vector<std::uint32_t> code_points(std::string_view in) {
    std::vector<std::uint32_t> out;
    for (std::size_t i = 0; i < in.size();) {
        const auto c = static_cast<unsigned char>(in[i]);
        const std::size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        std::uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        for (std::size_t k = 1; k < len && i + k < in.size(); ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(in[i + k]) & 0x3F);
        out.push_back(cp);
        i += len;
    }
    return out;
}

// JSON \uXXXX escapes for every code point (surrogate pairs above U+FFFF).
std::string js_u(std::string_view in) {
    static constexpr char h[] = "0123456789abcdef";
    std::string out;
    const auto unit = [&](std::uint32_t u) {
        out += "\\u";
        for (int shift = 12; shift >= 0; shift -= 4)
            out += h[(u >> shift) & 15];
    };
    for (const auto cp : code_points(in)) {
        if (cp >= 0x10000) {
            unit(0xD800 + ((cp - 0x10000) >> 10));
            unit(0xDC00 + ((cp - 0x10000) & 0x3FF));
        } else {
            unit(cp);
        }
    }
    return out;
}

std::string html_enc(std::string_view in) {
    std::string out;
    char buf[16];
    for (const auto cp : code_points(in)) {
        std::snprintf(buf, sizeof buf, "&#x%x;", cp);
        out += buf;
    }
    return out;
}

// U+200B ZERO WIDTH SPACE between code points (not inside line breaks).
std::string zero_width(std::string_view in) {
    std::string out;
    const auto cps = code_points(in);
    for (std::size_t i = 0; i < cps.size(); ++i) {
        utf8(cps[i], out);
        if (i + 1 < cps.size() && cps[i] != '\n')
            utf8(0x200B, out);
    }
    return out;
}

std::string full_width(std::string_view in) {
    std::string out;
    for (const char ch : in) {
        const auto c = static_cast<unsigned char>(ch);
        if (c > 0x20 && c < 0x7f)
            utf8(0xFF01 + (c - 0x21), out);
        else
            out += ch;
    }
    return out;
}

// Cyrillic and Greek letters that look like Latin ones.
std::string homoglyphs(std::string_view in) {
    static const std::map<char, std::uint32_t> m = {
        {'a', 0x0430}, {'c', 0x0441}, {'e', 0x0435}, {'o', 0x043E}, {'p', 0x0440},
        {'x', 0x0445}, {'y', 0x0443}, {'A', 0x0391}, {'B', 0x0392}, {'E', 0x0395},
        {'H', 0x0397}, {'K', 0x039A}, {'M', 0x039C}, {'O', 0x039F}, {'T', 0x03A4},
    };
    std::string out;
    for (const char ch : in) {
        auto it = m.find(ch);
        if (it != m.end())
            utf8(it->second, out);
        else
            out += ch;
    }
    return out;
}

// Every byte of `s` through printf format `fmt` (one unsigned conversion).
std::string escape_each(std::string_view s, const char* fmt) {
    std::string out;
    char buf[16];
    for (const unsigned char c : s) {
        std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(c));
        out += buf;
    }
    return out;
}

std::string gzip(std::string_view in) {
    z_stream zs{};
    EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::string out(deflateBound(&zs, static_cast<uLong>(in.size())) + 32, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

struct wrapping {
    std::string name;
    std::function<std::string(std::string_view)> apply;
};

// Wrappings that compose; the pairs are taken over this list.
const std::vector<wrapping>& base_wrappings() {
    static const std::vector<wrapping> w = {
        {"base64", [](std::string_view s) { return b64(s, false, true); }},
        {"base64url-nopad", [](std::string_view s) { return b64(s, true, false); }},
        {"base64-wrap76", [](std::string_view s) { return b64(s, false, true, 76); }},
        {"hex", [](std::string_view s) { return hexenc(s, ""); }},
        {"hex-colon", [](std::string_view s) { return hexenc(s, ":"); }},
        {"hex-backslash-x", [](std::string_view s) { return hexenc(s, "", "\\x"); }},
        {"pct", [](std::string_view s) { return pct_all(s); }},
        {"json-u", [](std::string_view s) { return js_u(s); }},
        {"html", [](std::string_view s) { return html_enc(s); }},
        {"zero-width", [](std::string_view s) { return zero_width(s); }},
        {"full-width", [](std::string_view s) { return full_width(s); }},
        {"homoglyph", [](std::string_view s) { return homoglyphs(s); }},
        {"gzip-base64", [](std::string_view s) { return b64(gzip(s), false, true); }},
    };
    return w;
}

const std::vector<wrapping>& single_only() {
    static const std::vector<wrapping> w = {
        {"hex-dash", [](std::string_view s) { return hexenc(s, "-"); }},
        {"hex-space", [](std::string_view s) { return hexenc(s, " "); }},
        {"pct2", [](std::string_view s) { return pct_all(pct_all(s)); }},
        {"pct3", [](std::string_view s) { return pct_all(pct_all(pct_all(s))); }},
        {"base64-wrap64", [](std::string_view s) { return b64(s, false, true, 64); }},
        // Escapes of other languages (issue 21): \UXXXXXXXX (C, Python), \x{XX} (Perl),
        // %uXXXX (JavaScript's escape()).
        {"esc-U8", [](std::string_view s) { return escape_each(s, "\\U%08X"); }},
        {"esc-x-brace", [](std::string_view s) { return escape_each(s, "\\x{%x}"); }},
        {"pct-u", [](std::string_view s) { return escape_each(s, "%%u%04X"); }},
    };
    return w;
}

struct planted {
    std::string rule;
    std::string text;
};

const std::vector<planted>& tokens() {
    static const std::vector<planted> t = [] {
        std::vector<planted> v;
        for (const char* id :
             {"github-pat-classic", "aws-access-key-id", "openai-project-key", "anthropic-api-key",
              "slack-bot-token", "private-key-rsa", "credit-card-number"}) {
            v.push_back({id, first_example(id)});
        }
        return v;
    }();
    return t;
}

// One JSON string literal (RFC 8259 escaping of quotes, backslashes and controls).
std::string json_str(std::string_view s) {
    std::string out = "\"";
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            out += "\\u00" + hexenc(std::string(1, ch), "");
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

class variants_test : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_NE(builtin(), nullptr);
        scanner_.emplace(builtin());
        for (const auto& t : tokens())
            ASSERT_FALSE(t.text.empty()) << t.rule << " has no example";
    }

    // The inspector's verdict over a whole request; findings of head and body joined.
    verdict inspect(std::string_view target, std::string_view host,
                    std::vector<header_view> headers, std::string_view body) {
        inspector ins(pol_, *scanner_);
        request_view req{"POST", target, host, 443, headers};
        auto h = ins.on_head(req);
        if (h.kind != verdict_kind::forward)
            return h;
        auto b = ins.on_body(body);
        b.findings.insert(b.findings.begin(), h.findings.begin(), h.findings.end());
        return b;
    }

    static bool has_rule(const verdict& v, std::string_view rule) {
        for (const auto& f : v.findings)
            if (f.rule == rule)
                return true;
        return false;
    }

    // Plants `wrapped` in each location; returns the names of those where `rule` was
    // missed (empty: found everywhere).
    std::vector<std::string> missed(std::string_view rule, const std::string& wrapped) {
        std::vector<std::string> miss;
        const auto check = [&](std::string_view where, const verdict& v) {
            if (!(v.status == 403 && has_rule(v, rule)))
                miss.push_back(std::string(where) + "(" + std::to_string(v.status) + " " +
                               v.reason + ")");
        };
        check("json", inspect("/v1/x", "api.example.com", {{"Content-Type", "application/json"}},
                              "{\"input\": " + json_str(wrapped) + "}"));
        check("form", inspect("/v1/x", "api.example.com",
                              {{"Content-Type", "application/x-www-form-urlencoded"}},
                              "a=1&data=" + form_enc(wrapped) + "&b=2"));
        const std::string mp = "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; "
                               "filename=\"notes.txt\"\r\nContent-Type: text/plain\r\n\r\n" +
                               wrapped + "\r\n--XyZ--\r\n";
        check("multipart", inspect("/upload", "api.example.com",
                                   {{"Content-Type", "multipart/form-data; boundary=XyZ"}}, mp));
        if (wrapped.find_first_of("\r\n") == std::string::npos) {
            check("header", inspect("/v1/x", "api.example.com", {{"X-Data", wrapped}}, ""));
        }
        check("query",
              inspect("/v1/search?q=" + form_enc(wrapped) + "&page=2", "api.example.com", {}, ""));
        return miss;
    }

    policy pol_;
    std::optional<detectors::scanner> scanner_;
};

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v)
        out += (out.empty() ? "" : ", ") + s;
    return out;
}

} // namespace

TEST_F(variants_test, planted_tokens_are_found_raw_in_every_location) {
    for (const auto& t : tokens()) {
        EXPECT_EQ(join(missed(t.rule, t.text)), "") << t.rule << " raw";
    }
}

TEST_F(variants_test, every_single_wrapping_in_every_location) {
    std::vector<wrapping> all = base_wrappings();
    all.insert(all.end(), single_only().begin(), single_only().end());
    for (const auto& t : tokens()) {
        for (const auto& w : all) {
            EXPECT_EQ(join(missed(t.rule, w.apply(t.text))), "") << t.rule << " " << w.name;
        }
    }
}

TEST_F(variants_test, every_pair_of_wrappings_in_every_location) {
    for (const auto& t : tokens()) {
        for (const auto& inner : base_wrappings()) {
            for (const auto& outer : base_wrappings()) {
                const std::string wrapped = outer.apply(inner.apply(t.text));
                EXPECT_EQ(join(missed(t.rule, wrapped)), "")
                    << t.rule << " " << inner.name << " then " << outer.name;
            }
        }
    }
}

TEST_F(variants_test, finding_names_location_chain_and_outer_range) {
    const std::string token = first_example("github-pat-classic");
    const std::string prefix = "{\"a\": \"";
    const std::string wrapped = b64(pct_all(token), false, true);
    const std::string body = prefix + wrapped + "\"}";
    auto v = inspect("/v1/x", "api.example.com", {}, body);
    ASSERT_EQ(v.status, 403);
    ASSERT_EQ(v.findings.size(), 1u);
    const auto& f = v.findings[0];
    EXPECT_EQ(f.location, "body");
    EXPECT_EQ(f.variant, "base64>pct");
    EXPECT_EQ(f.offset, prefix.size());
    EXPECT_EQ(f.length, wrapped.size());
    EXPECT_EQ(f.fingerprint, detectors::fingerprint(token.substr(0, 40)));

    auto q = inspect("/v1/x?q=" + pct_all(pct_all(token)), "api.example.com", {}, "");
    ASSERT_EQ(q.status, 403);
    ASSERT_FALSE(q.findings.empty());
    EXPECT_EQ(q.findings[0].location, "url");
    EXPECT_EQ(q.findings[0].variant, "pct>pct");
}

TEST_F(variants_test, content_encodings_plain_and_stacked) {
    const std::string token = first_example("github-pat-classic");
    const std::string body = "{\"k\": \"" + token + "\"}";
    auto g =
        inspect("/v1/x", "api.example.com",
                {{"Content-Type", "application/json"}, {"Content-Encoding", "gzip"}}, gzip(body));
    EXPECT_EQ(g.status, 403);
    ASSERT_FALSE(g.findings.empty());
    EXPECT_EQ(g.findings[0].variant, "gzip");
    // gzip applied twice (listed in order of application).
    auto gg =
        inspect("/v1/x", "api.example.com", {{"Content-Encoding", "gzip, gzip"}}, gzip(gzip(body)));
    EXPECT_EQ(gg.status, 403);
    // Clean gzip passes; a Content-Encoding we do not know is refused, never passed.
    auto clean = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "gzip"}},
                         gzip("{\"messages\": [\"hello\"]}"));
    EXPECT_EQ(clean.status, 200);
    EXPECT_TRUE(clean.findings.empty());
    auto unknown = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "lzma"}}, body);
    EXPECT_EQ(unknown.status, 400);
    EXPECT_EQ(unknown.reason, "bad_encoding");
    auto garbage = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "br"}}, body);
    EXPECT_EQ(garbage.status, 400);
}

TEST_F(variants_test, brotli_and_zstd_bodies) {
    const std::string token = first_example("github-pat-classic");
    const std::string body = "{\"k\": \"" + token + "\"}";
    std::string br(BrotliEncoderMaxCompressedSize(body.size()), '\0');
    std::size_t br_size = br.size();
    ASSERT_TRUE(BrotliEncoderCompress(BROTLI_DEFAULT_QUALITY, BROTLI_DEFAULT_WINDOW,
                                      BROTLI_DEFAULT_MODE, body.size(),
                                      reinterpret_cast<const std::uint8_t*>(body.data()), &br_size,
                                      reinterpret_cast<std::uint8_t*>(br.data())));
    br.resize(br_size);
    std::string zs(ZSTD_compressBound(body.size()), '\0');
    const std::size_t zs_size = ZSTD_compress(zs.data(), zs.size(), body.data(), body.size(), 3);
    ASSERT_FALSE(ZSTD_isError(zs_size));
    zs.resize(zs_size);
    auto b = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "br"}}, br);
    EXPECT_EQ(b.status, 403);
    ASSERT_FALSE(b.findings.empty());
    EXPECT_EQ(b.findings[0].variant, "br");
    auto z = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "zstd"}}, zs);
    EXPECT_EQ(z.status, 403);
    // Stacked: gzip applied first, then zstd (undone in reverse).
    std::string gz = gzip(body);
    std::string zgz(ZSTD_compressBound(gz.size()), '\0');
    zgz.resize(ZSTD_compress(zgz.data(), zgz.size(), gz.data(), gz.size(), 3));
    auto s = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "gzip, zstd"}}, zgz);
    EXPECT_EQ(s.status, 403);
    ASSERT_FALSE(s.findings.empty());
    EXPECT_EQ(s.findings[0].variant, "zstd>gzip");
    // Truncated streams are malformed: refused, never passed.
    auto t = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "zstd"}},
                     zs.substr(0, zs.size() / 2));
    EXPECT_EQ(t.status, 400);
}

TEST_F(variants_test, multipart_transfer_encodings_and_event_stream) {
    const std::string token = first_example("github-pat-classic");
    const std::string qp_token = token.substr(0, 10) + "=\r\n" + token.substr(10);
    for (const auto& [cte, enc] : std::vector<std::pair<std::string, std::string>>{
             {"base64", b64(token + "\n", false, true, 76)}, {"quoted-printable", qp_token}}) {
        const std::string mp = "--b\r\nContent-Disposition: form-data; name=\"x\"\r\n"
                               "Content-Transfer-Encoding: " +
                               cte + "\r\n\r\n" + enc + "\r\n--b--\r\n";
        auto v = inspect("/u", "api.example.com",
                         {{"Content-Type", "multipart/form-data; boundary=\"b\""}}, mp);
        EXPECT_EQ(v.status, 403) << cte;
    }
    const std::string sse =
        "event: x\ndata: " + token.substr(0, 20) + "\ndata: " + token.substr(20) + "\n\n";
    auto s = inspect("/events", "api.example.com", {{"Content-Type", "text/event-stream"}}, sse);
    EXPECT_EQ(s.status, 403);
    ASSERT_FALSE(s.findings.empty());
    EXPECT_EQ(s.findings[0].variant, "sse");
}

TEST_F(variants_test, key_split_across_host_labels) {
    const std::string token = first_example("github-pat-classic");
    const std::string host = token.substr(0, 20) + "." + token.substr(20) + ".exfil.example.com";
    auto v = inspect("/", host, {}, "");
    EXPECT_EQ(v.status, 403);
    ASSERT_FALSE(v.findings.empty());
    EXPECT_EQ(v.findings[0].variant, "host");
}

TEST_F(variants_test, benign_look_alikes_pass) {
    std::mt19937 rng(42);
    std::string png = "\x89PNG\r\n\x1a\n";
    for (int i = 0; i < 3000; ++i)
        png += static_cast<char>(rng() & 0xff);
    std::string hashes;
    for (int i = 0; i < 50; ++i) {
        std::string raw;
        for (int k = 0; k < 32; ++k)
            raw += static_cast<char>(rng() & 0xff);
        hashes += "sha256:" + hexenc(raw, "") + "\n";
    }
    std::string uuids;
    for (int i = 0; i < 50; ++i) {
        std::string raw;
        for (int k = 0; k < 16; ++k)
            raw += static_cast<char>(rng() & 0xff);
        const std::string h = hexenc(raw, "");
        uuids += h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" +
                 h.substr(16, 4) + "-" + h.substr(20) + "\n";
    }
    const std::string js =
        "!function(e,t){\"object\"==typeof exports&&\"undefined\"!=typeof module?module."
        "exports=t():\"function\"==typeof define&&define.amd?define(t):(e=e||self).Vue=t()}"
        "(this,function(){\"use strict\";var e=Object.freeze({});function t(e){return null=="
        "e}function n(e){return null!=e}var r=/\\u0041bc\\x20[a-z]+/g,o=\"\\u00e9t\\u00e9\";"
        "function getElementsByClassNameInternalHelper(e){return encodeURIComponent(e)."
        "replace(/%20/g,\"+\")}";
    const std::string cyrillic_greek =
        "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю. "
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε, αυτό είναι ένα κείμενο.";
    const std::vector<std::pair<std::string, std::string>> bodies = {
        {"png-data-uri", "{\"image\": \"data:image/png;base64," + b64(png, false, true) + "\"}"},
        {"png-mime", b64(png, false, true, 76)},
        {"hashes", hashes},
        {"uuids", uuids},
        {"minified-js", js},
        {"cyrillic-greek", cyrillic_greek},
        {"html", "<p>Tom &amp; Jerry &lt;3 &#x263A; caf&eacute; &#233;t&#233;</p>"},
        {"url-encoded", "q=" + form_enc("hello world / search?x=1&y=caf\xc3\xa9")},
    };
    for (const auto& [name, body] : bodies) {
        auto v = inspect("/v1/x", "api.example.com", {{"Content-Type", "application/json"}}, body);
        EXPECT_EQ(v.status, 200) << name;
        for (const auto& f : v.findings)
            ADD_FAILURE() << name << ": " << f.rule << " via " << f.variant;
        auto g = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "gzip"}}, gzip(body));
        EXPECT_EQ(g.status, 200) << name << " gzip";
    }
}

TEST_F(variants_test, protected_values_in_every_wrapping) {
    const std::string secret = "my-internal-deploy-passphrase-7731";
    auto pv = protected_values::compile({secret});
    ASSERT_TRUE(pv.has_value());
    variant_options o;
    o.protect = *pv;
    for (const auto& w : base_wrappings()) {
        inspector ins(pol_, *scanner_, o);
        const std::string body = "{\"note\": " + json_str(w.apply(secret)) + "}";
        auto h = ins.on_head({"POST", "/v1/x", "api.example.com", 443, {}});
        auto v = ins.on_body(body);
        EXPECT_EQ(v.status, 403) << w.name;
        ASSERT_FALSE(v.findings.empty()) << w.name;
        EXPECT_EQ(v.findings[0].rule, "protected-value");
        EXPECT_EQ(v.findings[0].fingerprint, detectors::fingerprint(secret));
    }
    EXPECT_FALSE(protected_values::compile({"abc"}).has_value());
}

TEST_F(variants_test, gzip_bomb_is_refused_with_bounded_memory) {
    // 1 GiB of zeros, compressed in streaming fashion (about 1 MiB).
    z_stream zs{};
    ASSERT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
    std::string zeros(1 << 20, '\0');
    std::string bomb;
    std::string chunk(1 << 16, '\0');
    for (int i = 0; i < 1024; ++i) {
        zs.next_in = reinterpret_cast<Bytef*>(zeros.data());
        zs.avail_in = static_cast<uInt>(zeros.size());
        do {
            zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
            zs.avail_out = static_cast<uInt>(chunk.size());
            deflate(&zs, i == 1023 ? Z_FINISH : Z_NO_FLUSH);
            bomb.append(chunk.data(), chunk.size() - zs.avail_out);
        } while (zs.avail_out == 0);
    }
    deflateEnd(&zs);
    ASSERT_LT(bomb.size(), 4u << 20);

    rusage before{};
    getrusage(RUSAGE_SELF, &before);
    auto v = inspect("/v1/x", "api.example.com", {{"Content-Encoding", "gzip"}}, bomb);
    rusage after{};
    getrusage(RUSAGE_SELF, &after);
    EXPECT_EQ(v.status, 413);
    EXPECT_EQ(v.reason, "decode_budget");
    // The default budget allows 1 MiB + 16x the input before refusing: well under 128 MiB.
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 128 * 1024) << "KiB of peak RSS growth";
}

TEST_F(variants_test, candidate_budget_is_a_result_not_a_skip) {
    variant_options o;
    o.budget.max_candidates = 10;
    std::string body;
    for (int i = 0; i < 100; ++i)
        body += "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo= ";
    variant_scanner vs(*scanner_, o);
    std::vector<variant_finding> out;
    EXPECT_EQ(vs.scan(body, "body", out), variant_status::over_budget);
    variant_options off;
    off.decoders = false;
    variant_scanner raw_only(*scanner_, off);
    EXPECT_EQ(raw_only.scan(body, "body", out), variant_status::ok);
}

// Deep chains (a red-team pass sent base64 x6 and x7, hex x6 and gzip x6 through, all
// forwarded while max_depth was 5): found at any depth a real chain reaches, and a chain
// deeper than max_depth is over budget, never forwarded unscanned.
TEST_F(variants_test, deep_chains_are_found_or_over_budget) {
    const std::string token(tokens().front().text);
    const auto nest = [](std::string s, int times, auto&& step) {
        for (int i = 0; i < times; ++i)
            s = step(s);
        return s;
    };
    const auto base64 = [](const std::string& s) { return b64(s, false, true); };
    const auto hex = [](const std::string& s) { return hexenc(s, ""); };
    const auto gz_b64 = [](const std::string& s) { return b64(gzip(s), false, true); };
    for (const int times : {5, 6, 7, 9}) {
        for (const auto& [name, wrapped] :
             {std::pair{"base64", nest("key=" + token, times, base64)},
              std::pair{"hex", nest("key=" + token, times > 6 ? 6 : times, hex)},
              std::pair{"gzip>base64", nest("key=" + token, times > 6 ? 6 : times, gz_b64)}}) {
            variant_scanner vs(*scanner_);
            std::vector<variant_finding> out;
            EXPECT_EQ(vs.scan(wrapped, "body", out), variant_status::ok) << name << " x" << times;
            EXPECT_FALSE(out.empty()) << name << " x" << times;
        }
    }
    variant_options shallow;
    shallow.budget.max_depth = 3;
    variant_scanner vs(*scanner_, shallow);
    std::vector<variant_finding> out;
    EXPECT_EQ(vs.scan(nest("key=" + token, 6, base64), "body", out), variant_status::over_budget);
}

// Compressed inside compressed with no Content-Encoding (gzip of gzip, zstd of gzip, gzip
// after junk inside a gzip, gzip in base64 in gzip): every layer is opened, each counting
// against max_depth; one still compressed past it is 413 decode_budget, never forwarded.
TEST_F(variants_test, compressed_in_compressed_without_content_encoding) {
    const std::string token(tokens().front().text);
    const auto zstd = [](const std::string& s) {
        std::string z(ZSTD_compressBound(s.size()), '\0');
        z.resize(ZSTD_compress(z.data(), z.size(), s.data(), s.size(), 3));
        return z;
    };
    const auto gz_times = [](std::string s, int times) {
        for (int i = 0; i < times; ++i)
            s = gzip(s);
        return s;
    };
    const std::string text = "export AWS_PROFILE=ci\nkey=" + token + "\n";
    const std::vector<std::pair<std::string, std::string>> bodies = {
        {"gzip x2", gz_times(text, 2)},
        {"gzip x3", gz_times(text, 3)},
        {"gzip x6", gz_times(text, 6)},
        {"gzip x9", gz_times(text, 9)},
        {"zstd>gzip", zstd(gzip(text))},
        {"gzip>zstd>gzip", gzip(zstd(gzip(text)))},
        {"junk+gzip in gzip", gzip("release notes, binary attached: " + gz_times(text, 2))},
        {"gzip>base64>gzip", gzip("blob=" + b64(gzip(text), false, true))},
        {"token after the inner stream", gzip(gzip("clean") + "\n" + text)},
    };
    for (const auto& [name, body] : bodies)
        for (const std::string_view ct : {"application/octet-stream", "text/plain"}) {
            auto v = inspect("/v1/upload", "api.example.com", {{"Content-Type", ct}}, body);
            EXPECT_EQ(v.status, 403) << name << " " << ct << ": " << v.reason;
        }
    // Clean nested streams pass; a stack deeper than max_depth is over budget.
    EXPECT_EQ(inspect("/v1/upload", "api.example.com",
                      {{"Content-Type", "application/octet-stream"}},
                      gz_times("{\"messages\": [\"hello\"]}", 4))
                  .status,
              200);
    auto deep = inspect("/v1/upload", "api.example.com",
                        {{"Content-Type", "application/octet-stream"}}, gz_times(text, 20));
    EXPECT_EQ(deep.status, 413);
    EXPECT_EQ(deep.reason, "decode_budget");
}

// Bytes whose raw DEFLATE decode is themselves less a byte ("\x12" repeated): each copy
// was opened again at the next depth, until max_depth refused a clean body 413
// decode_budget (1 in 200 hex dumps of 64 KiB of random bytes held such a stretch). The
// copies are opened where they start in the bytes instead; a token beside them is found.
TEST_F(variants_test, bytes_that_decode_to_their_own_tail_do_not_nest) {
    const std::string fixed(200, '\x12');
    const std::vector<std::pair<std::string, std::string>> bodies = {
        {"application/octet-stream", fixed},
        {"application/octet-stream", "%PDF-1.7\n" + fixed + "\n%%EOF\n"},
        {"application/json", "{\"blob\": \"" + hexenc(fixed, "") + "\"}"},
        {"application/json", "{\"blob\": \"" + b64(fixed, false, true) + "\"}"},
    };
    for (const auto& [ct, body] : bodies) {
        auto v = inspect("/v1/upload", "api.example.com", {{"Content-Type", ct}}, body);
        EXPECT_EQ(v.status, 200) << ct << ": " << v.reason;
    }
    const std::string token(tokens().front().text);
    auto v = inspect("/v1/upload", "api.example.com",
                     {{"Content-Type", "application/octet-stream"}}, fixed + " key=" + token);
    EXPECT_EQ(v.status, 403) << v.reason;
}

// Base64 of random bytes (a photo, an encrypted file) has a '/' every 64 characters or
// so, and each piece after one whose first characters read as text or a stream start was
// decoded to the run's end: quadratic, so a clean base64 file of 80 KiB and more was
// refused 413 decode_budget, as a whole body and in sluice scan. A token after such a
// piece, and a stream starting at one, are still found.
TEST_F(variants_test, long_base64_of_random_bytes_is_not_decoded_once_per_piece) {
    std::mt19937 rng(3);
    const auto random_bytes = [&](std::size_t n) {
        std::string r(n, '\0');
        for (auto& ch : r)
            ch = static_cast<char>(rng());
        return r;
    };
    for (const std::size_t size : {80u << 10, 300u << 10, 3u << 20}) {
        const std::string raw = random_bytes(size);
        const std::vector<std::pair<std::string, std::string>> bodies = {
            {"application/json",
             "{\"model\": \"m\", \"image\": \"" + b64(raw, false, true) + "\"}"},
            {"text/plain", b64(raw, false, true, 76)},
        };
        for (const auto& [ct, body] : bodies) {
            auto v = inspect("/v1/upload", "api.example.com", {{"Content-Type", ct}}, body);
            EXPECT_EQ(v.status, 200) << size << " " << ct << ": " << v.reason;
        }
    }
    const std::string token(tokens().front().text);
    const std::string noise = b64(random_bytes(200 << 10), false, false);
    for (const auto& [name, tail] :
         {std::pair{"text", b64("key=" + token + " and some words after it", false, true)},
          std::pair{"gzip", b64(gzip("key=" + token), false, true)}}) {
        // After a '/' of the noise's own, at each of the four alignments.
        for (std::size_t cut = 0; cut < 4; ++cut) {
            const std::string body =
                "{\"f\": \"" + noise.substr(0, noise.size() - cut) + "/" + tail + "\"}";
            auto v = inspect("/v1/upload", "api.example.com",
                             {{"Content-Type", "application/json"}}, body);
            EXPECT_EQ(v.status, 403) << name << " cut " << cut << ": " << v.reason;
        }
    } // A red-team find: a decode that starts on the 'n' of an escaped line break ("/\\n")
    // reads the letter as a character where earlier decodes skip the pair; counting it put
    // the later pieces at the wrong alignment, and the token's tail was skipped as noise.
    const std::string text = "the password for the deploy is " + token + " " + [] {
        std::string w;
        for (int k = 0; k < 8; ++k)
            w += "and some more ordinary words follow here ";
        return w;
    }();
    const std::string secret = b64(text, false, false);
    for (const std::string_view brk : {"\\n", "\\r\\n"}) {
        const std::string run = std::string(33, 'A') + "/" + b64("hello world!", false, false) +
                                std::string(400, 'A') + "/" + std::string(brk) + "AAA" +
                                b64("abcdefghi", false, false) + std::string(198, 'A') + "/" +
                                secret.substr(0, 68) + "\n" + secret.substr(68) + "\n";
        auto v = inspect("/v1/upload", "api.example.com", {{"Content-Type", "text/plain"}}, run);
        EXPECT_EQ(v.status, 403) << brk << ": " << v.reason;
    } // Another: a zlib stream (holding the token, then 3,000 zero bytes) whose base64 has
    // an escaped line break after 2 characters; its start was judged from the raw 16
    // characters, which read no zlib header through the escape, and was skipped.
    const std::string zlib_behind_escape =
        std::string("payload: QYWI/aGVsbG8gd29ybGQsIHg/WE\\ndLrSxKLytIy8tXSM8oiPfPSAorKsjPDEsPC"
                    "jP1TPNxSk4CSrn7JnnlhgQEG6Vn+ZWWAADl1hKF") +
        std::string(4000, 'A') + "\n";
    auto z = inspect("/v1/upload", "api.example.com", {{"Content-Type", "text/plain"}},
                     zlib_behind_escape);
    EXPECT_EQ(z.status, 403) << z.reason;
}

// Base64 wrapped at any width, regular or not, with CRLF or LF line ends.
TEST_F(variants_test, base64_wrapped_at_any_width) {
    const auto wrap = [](const std::string& in, const std::vector<std::size_t>& widths,
                         std::string_view eol) {
        std::string out;
        std::size_t w = 0;
        for (std::size_t p = 0; p < in.size();) {
            const std::size_t n = widths[w++ % widths.size()];
            if (p)
                out += eol;
            out += in.substr(p, n);
            p += n;
        }
        return out;
    };
    const std::vector<std::vector<std::size_t>> shapes = {
        {60}, {70}, {72}, {50}, {16}, {61, 58, 64, 17, 70}, {76, 40}};
    for (const auto& t : tokens()) {
        const std::string text = "settings exported on request\nAPI_KEY=" + t.text +
                                 "\nregion=eu-west-1 retries=3 timeout=30s\n";
        const std::string enc = b64(text, false, true);
        for (const auto& widths : shapes) {
            // Line breaks raw, or written as JSON/JavaScript string escapes (a wrapped
            // blob inside a string literal, as a raw file or a non-JSON body carries it).
            for (const std::string_view eol : {"\r\n", "\n", "\\r\\n", "\\n"}) {
                const std::string body = "attachment follows:\n" + wrap(enc, widths, eol) +
                                         std::string(eol) + "thanks\n";
                for (const std::string_view ct : {"text/plain", "application/octet-stream"}) {
                    auto v = inspect("/v1/x", "api.example.com", {{"Content-Type", ct}}, body);
                    EXPECT_TRUE(v.status == 403 && has_rule(v, t.rule))
                        << t.rule << " width " << widths.front() << " (" << widths.size()
                        << " widths) eol " << testing::PrintToString(std::string(eol)) << " " << ct
                        << ": " << v.status << " " << v.reason;
                }
            }
        }
    }
}

// Base64 cut into equal groups by two or three spaces, a space and a line break, or
// indented lines (a YAML block): the groups are joined like single-space groups. A blank
// line ends a run, so two paragraphs of words are not read as one.
TEST_F(variants_test, base64_groups_with_runs_of_spaces_or_indented_lines) {
    const auto cut = [](const std::string& in, std::size_t every, std::string_view sep) {
        std::string out;
        for (std::size_t p = 0; p < in.size(); p += every) {
            if (p)
                out += sep;
            out += in.substr(p, every);
        }
        return out;
    };
    for (const auto& t : tokens()) {
        const std::string enc = b64("API_KEY=" + t.text + "\n", false, true);
        for (const auto& [every, sep] : {std::pair<std::size_t, std::string_view>{12, "  "},
                                         {12, "   "},
                                         {8, "  "},
                                         {16, " \n"},
                                         {20, "\n    "},
                                         {24, "\r\n  "}}) {
            const std::string body = "data:\n    " + cut(enc, every, sep) + "\nend\n";
            auto v = inspect("/v1/x", "api.example.com", {{"Content-Type", "text/plain"}}, body);
            EXPECT_TRUE(v.status == 403 && has_rule(v, t.rule))
                << t.rule << " every " << every << " sep "
                << testing::PrintToString(std::string(sep)) << ": " << v.status << " " << v.reason;
        }
    }
}

// Base64 glued to the word before it ("upl<base64>"): decoding from the run's start
// misaligns every group when the word's length is not a multiple of 4, so the base64 is
// found at start alignments 1, 2 and 3 too; padded or not, wrapped or not, with a word
// glued after it or ending the run.
TEST_F(variants_test, base64_glued_to_a_word_at_any_alignment) {
    const std::vector<std::string> prefixes = {
        "", "u", "up", "upl", "upld", "uploa", "upload", "uploade", "/v1/upload/abc"};
    const std::vector<std::string> suffixes = {"", "ad", "x"};
    for (const auto& t : tokens()) {
        for (std::size_t extra = 0; extra < 3; ++extra) {
            // Text lengths of every residue mod 3: two, one and no padding characters.
            const std::string text = "API_KEY=" + t.text + std::string(extra, '.') + "\n";
            struct form {
                bool url, pad;
                std::size_t wrap;
            };
            for (const auto& [url, pad, wrap] : {form{false, true, 0}, form{false, false, 0},
                                                 form{true, false, 0}, form{false, true, 76}}) {
                const std::string enc = b64(text, url, pad, wrap);
                for (const auto& pre : prefixes) {
                    for (const auto& suf : suffixes) {
                        const std::string body =
                            "...line 21283 of " + pre + enc + suf + " b64: ...";
                        auto v = inspect("/v1/x", "api.example.com",
                                         {{"Content-Type", "text/plain"}}, body);
                        EXPECT_TRUE(v.status == 403 && has_rule(v, t.rule))
                            << t.rule << " prefix '" << pre << "' suffix '" << suf << "' extra "
                            << extra << (url ? " url" : " std") << (pad ? " pad" : " nopad")
                            << " wrap " << wrap << ": " << v.status << " " << v.reason;
                    }
                }
            }
        }
    }
    // A gzip stream's base64 ("H4sI...") glued to a word of 1-3 characters.
    for (const auto& t : tokens()) {
        const std::string enc = b64(gzip("API_KEY=" + t.text + "\n"), false, true);
        for (const std::string pre : {"u", "up", "upl"}) {
            auto v = inspect("/v1/x", "api.example.com", {{"Content-Type", "text/plain"}},
                             "...line 21283 of " + pre + enc + "ad b64: ...");
            EXPECT_TRUE(v.status == 403 && has_rule(v, t.rule))
                << t.rule << " gzip prefix '" << pre << "': " << v.status << " " << v.reason;
        }
    }
}

// The report that found the gap: a token's base64 after "upl" (alignment 3) and before
// "ad". The finding starts where the base64 does and ends with the run.
TEST_F(variants_test, base64_glued_finding_starts_at_the_base64) {
    const std::string enc =
        b64("GITHUB_TOKEN=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\n", false, true);
    ASSERT_EQ(enc, "R0lUSFVCX1RPS0VOPWdocF9HeWxuTnpxQzJ6bWt5SDRqRzRxQUJ3dWNsaEZPRVMwYmQyZGkK");
    for (const std::string pre : {"u", "up", "upl"}) {
        const std::string head = "...line 21283 of " + pre;
        const std::string body = head + enc + "ad b64: ...";
        auto v = inspect("/v1/x", "api.example.com", {{"Content-Type", "text/plain"}}, body);
        ASSERT_EQ(v.status, 403) << pre;
        // The token, and the line "GITHUB_TOKEN=<token>" as an unquoted assignment.
        const auto it = std::find_if(v.findings.begin(), v.findings.end(),
                                     [](const auto& f) { return f.rule == "github-pat-classic"; });
        ASSERT_NE(it, v.findings.end()) << pre;
        const auto& f = *it;
        EXPECT_EQ(f.variant, "base64");
        EXPECT_EQ(f.offset, head.size()) << pre;
        EXPECT_EQ(f.length, enc.size() + 2) << pre;
    }
}

static std::string zlib_compress(std::string_view in) {
    uLongf len = compressBound(static_cast<uLong>(in.size()));
    std::string out(len, '\0');
    EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &len,
                        reinterpret_cast<const Bytef*>(in.data()), static_cast<uLong>(in.size()),
                        6),
              Z_OK);
    out.resize(len);
    return out;
}

static std::string zstd_compress(std::string_view in) {
    std::string out(ZSTD_compressBound(in.size()), '\0');
    const std::size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out.resize(ZSTD_isError(n) ? 0 : n);
    return out;
}

// Compressed bytes sent as they are, without Content-Encoding: recognised by their magic.
TEST_F(variants_test, compressed_body_without_content_encoding) {
    for (const auto& t : tokens()) {
        const std::string text = "{\"note\": \"backup\", \"key\": \"" + t.text + "\"}\n";
        const std::vector<std::pair<std::string, std::string>> forms = {
            {"gzip", gzip(text)}, {"deflate", zlib_compress(text)}, {"zstd", zstd_compress(text)}};
        for (const auto& [name, bytes] : forms) {
            for (const std::string_view ct : {"application/octet-stream", "application/gzip", ""}) {
                std::vector<header_view> h;
                if (!ct.empty())
                    h.push_back({"Content-Type", ct});
                auto v = inspect("/upload", "api.example.com", h, bytes);
                EXPECT_TRUE(v.status == 403 && has_rule(v, t.rule))
                    << t.rule << " " << name << " as " << ct << ": " << v.status;
                // zstd keeps short literals as they are (the raw pass sees them); its
                // decoding is checked below.
                bool named = name == "zstd";
                for (const auto& f : v.findings)
                    named = named || f.variant == name;
                EXPECT_TRUE(named) << t.rule << " " << name << ": variant not named";
            }
        }
    }
    std::string out;
    std::string_view name;
    const std::string text = "zstd frame " + std::string(100, 'z');
    EXPECT_EQ(decode::sniffed(zstd_compress(text), 1 << 20, out, name), decode::inflate_status::ok);
    EXPECT_EQ(name, "zstd");
    EXPECT_EQ(out, text);
    EXPECT_EQ(decode::sniffed("plain text", 1 << 20, out, name), decode::inflate_status::unknown);
    // A stream cut short is still read as far as it goes.
    const std::string token = first_example("github-pat-classic");
    std::string padded = "{\"key\": \"" + token + "\", \"pad\": \"";
    std::mt19937 rng(7);
    for (int i = 0; i < 20000; ++i)
        padded += static_cast<char>('a' + rng() % 26);
    padded += "\"}";
    const std::string gz = gzip(padded);
    auto cut = inspect("/upload", "api.example.com", {}, gz.substr(0, gz.size() / 2));
    EXPECT_EQ(cut.status, 403);
    EXPECT_TRUE(has_rule(cut, "github-pat-classic"));
    // Clean compressed bytes and bytes that only look like a zlib header pass.
    auto clean = inspect("/upload", "api.example.com", {}, gzip("{\"messages\": [\"hello\"]}"));
    EXPECT_EQ(clean.status, 200);
    std::string fake = "\x78\x9c";
    for (int i = 0; i < 200; ++i)
        fake += static_cast<char>(rng() & 0xff);
    auto f = inspect("/upload", "api.example.com", {}, fake);
    EXPECT_EQ(f.status, 200);
    // A bomb without Content-Encoding is over budget like a declared one.
    const std::string bomb = gzip(std::string(32u << 20, '\0'));
    ASSERT_LT(bomb.size(), 256u << 10);
    auto b =
        inspect("/upload", "api.example.com", {{"Content-Type", "application/octet-stream"}}, bomb);
    EXPECT_EQ(b.status, 413);
    EXPECT_EQ(b.reason, "decode_budget");
}

// JSON/JavaScript escapes in bodies that are not JSON: text, unknown and missing types.
TEST_F(variants_test, json_escapes_in_non_json_bodies) {
    // Mathematical bold letters and digits: outside the BMP (surrogate pairs in \u
    // escapes), folded to ASCII by NFKD.
    const auto bold = [](std::string_view in) {
        std::string out;
        for (const char ch : in) {
            std::uint32_t cp = static_cast<unsigned char>(ch);
            if (ch >= 'A' && ch <= 'Z')
                cp = 0x1D400 + (ch - 'A');
            else if (ch >= 'a' && ch <= 'z')
                cp = 0x1D41A + (ch - 'a');
            else if (ch >= '0' && ch <= '9')
                cp = 0x1D7CE + (ch - '0');
            if (cp < 0x80) {
                out += static_cast<char>(cp);
            } else {
                out += static_cast<char>(0xF0 | (cp >> 18));
                out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
                out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                out += static_cast<char>(0x80 | (cp & 0x3F));
            }
        }
        return out;
    };
    // RFC 8259 escaping with the short forms (\n, \", \\).
    const auto json_short = [](std::string_view in) {
        std::string out;
        for (const char ch : in) {
            if (ch == '\n')
                out += "\\n";
            else if (ch == '\r')
                out += "\\r";
            else if (ch == '"')
                out += "\\\"";
            else if (ch == '\\')
                out += "\\\\";
            else
                out += ch;
        }
        return out;
    };
    for (const auto& t : tokens()) {
        const std::vector<std::pair<std::string, std::string>> forms = {
            {"\\u", js_u(t.text)},
            {"\\x", hexenc(t.text, "", "\\x")},
            {"surrogate pairs", js_u(bold(t.text))},
            {"\\n \\\" mixed with \\u", json_short("say \"") + t.text.substr(0, 2) +
                                            js_u(t.text.substr(2, 6)) +
                                            json_short(t.text.substr(8) + "\"\n")},
        };
        for (const auto& [name, esc] : forms) {
            const std::string body =
                "log line 1\nrequest={\"input\": \"" + esc + "\", \"n\": 2}\nlog line 3\n";
            for (const std::string_view ct : {"text/plain", "application/x-unknown", ""}) {
                std::vector<header_view> h;
                if (!ct.empty())
                    h.push_back({"Content-Type", ct});
                auto v = inspect("/v1/x", "api.example.com", h, body);
                EXPECT_TRUE(v.status == 403 && has_rule(v, t.rule))
                    << t.rule << " " << name << " in " << ct << ": " << v.status;
            }
        }
    }
}

// Look-alike text is folded wherever it sits: at every offset from a 64-byte boundary
// (the candidate loop classifies the input in 64-byte chunks and reports those holding
// bytes >= 0x80), inside an escape string or a percent-encoded token (regions the loop
// visits and then skips: their non-ASCII bytes are looked at there), after a long run of
// the base64 alphabets, and at the very end of the input. The finding comes from folding
// the text as it is ("unicode"), not only from folding a decoded region later.
TEST_F(variants_test, look_alike_text_at_any_offset_and_inside_skipped_regions) {
    const std::vector<std::pair<std::string, std::string>> around = {
        {"", ""},
        {"s=\"\\x41\\x42 ", "\""},
        {"p=%41%42=", ""},
        {"id=" + std::string(100, 'Q') + " ", ""},
    };
    const std::vector<std::function<std::string(std::string_view)>> wraps = {homoglyphs, full_width,
                                                                             zero_width};
    for (const auto& t : tokens()) {
        for (std::size_t w = 0; w < wraps.size(); ++w) {
            const std::string wrapped = wraps[w](t.text);
            for (const auto& [pre, post] : around) {
                for (std::size_t offset = 0; offset <= 64; ++offset) {
                    for (const std::string_view tail : {"", "\nrest of the text\n"}) {
                        const std::string body = std::string(offset, '.') + " " + pre + wrapped +
                                                 post + std::string(tail);
                        variant_scanner vs(*scanner_);
                        std::vector<variant_finding> out;
                        ASSERT_EQ(vs.scan(body, "body", out), variant_status::ok);
                        bool found = false;
                        for (const auto& f : out)
                            found = found || (f.f.rule_id == t.rule &&
                                              (f.variant == "unicode" || f.variant == "raw"));
                        EXPECT_TRUE(found) << t.rule << " wrap " << w << " after \"" << pre
                                           << "\" at offset " << offset << " tail " << tail.size();
                    }
                }
            }
        }
    }
}

// Capital I written with a Cyrillic or Greek look-alike: TR39's skeleton of each is 'l'
// (it folds I, l and 1 together), which would break every upper-case key.
TEST_F(variants_test, capital_i_look_alikes_fold_to_i) {
    for (const std::uint32_t cp : {0x0406u, 0x0399u, 0x04C0u}) {
        for (const char* rule : {"aws-access-key-id", "github-pat-classic"}) {
            const std::string token = first_example(rule);
            ASSERT_NE(token.find('I'), std::string::npos) << rule;
            std::string spoofed;
            for (const char ch : token) {
                if (ch == 'I')
                    utf8(cp, spoofed);
                else
                    spoofed += ch;
            }
            EXPECT_EQ(join(missed(rule, spoofed)), "") << rule << " U+" << std::hex << cp;
        }
    }
}

// zstd inside base64 (and hex): opened like gzip and zlib, named "zstd" in the chain.
TEST_F(variants_test, zstd_inside_base64_and_hex) {
    for (const auto& t : tokens()) {
        const std::string text = "exported settings\nAPI_KEY=" + t.text + "\n";
        std::string zs(ZSTD_compressBound(text.size()), '\0');
        zs.resize(ZSTD_compress(zs.data(), zs.size(), text.data(), text.size(), 3));
        EXPECT_EQ(join(missed(t.rule, b64(zs, false, true))), "") << t.rule << " base64";
        EXPECT_EQ(join(missed(t.rule, hexenc(zs, ""))), "") << t.rule << " hex";
    }
    const std::string token = first_example("github-pat-classic");
    std::string zs(ZSTD_compressBound(token.size()), '\0');
    zs.resize(ZSTD_compress(zs.data(), zs.size(), token.data(), token.size(), 3));
    auto v = inspect("/v1/x", "api.example.com", {{"Content-Type", "text/plain"}},
                     "blob " + b64(zs, false, true) + " end");
    ASSERT_EQ(v.status, 403);
    bool chained = false;
    for (const auto& f : v.findings)
        chained = chained || f.variant.find("base64>zstd") != std::string::npos;
    EXPECT_TRUE(chained);
}

// base64 of binary around a secret (an archive of a .env file, a key store): the decoded
// bytes do not read as text, so they are not decoded further, but the rules see them.
TEST_F(variants_test, base64_of_binary_around_a_token) {
    std::string noise;
    for (int k = 0; k < 300; ++k)
        noise += static_cast<char>((k * 97 + 13) % 256 | 0x80);
    for (const auto& t : tokens()) {
        if (t.rule == "private-key-rsa")
            continue; // multi-line text: base64 of it reads as text anyway
        for (const std::size_t before : {8u, 16u, 100u, 300u}) {
            const std::string blob =
                noise.substr(0, before) + std::string(1, '\0') + t.text + '\0' + noise;
            EXPECT_EQ(join(missed(t.rule, b64(blob, false, true))), "")
                << t.rule << " after " << before << " binary bytes";
        }
    }
}

// Hex with one stray digit or a word glued on either side ("key" + hex, hex + "a").
TEST_F(variants_test, hex_glued_to_a_word_or_a_stray_digit) {
    for (const auto& t : tokens()) {
        if (t.rule == "private-key-rsa")
            continue; // its hex is cut into pieces by nothing: same path, longer
        const std::string h = hexenc(t.text, "");
        for (const std::string& glued :
             {"key" + h, h + "xyz", "a" + h, h + "a", "abc" + h, "x" + h + "g", "0" + h + "f"}) {
            EXPECT_EQ(join(missed(t.rule, glued)), "") << t.rule << " " << glued.substr(0, 6);
        }
    }
}

TEST(decoders, unit_cases) {
    std::string out;
    EXPECT_TRUE(decode::base64("aGVsbG8gd29ybGQ", out));
    EXPECT_EQ(out, "hello world");
    EXPECT_TRUE(decode::base64("aGVs\r\nbG8=", out));
    EXPECT_EQ(out, "hello");
    EXPECT_TRUE(decode::hex("\\x68\\x69", out));
    EXPECT_EQ(out, "hi");
    EXPECT_FALSE(decode::hex("6", out));
    EXPECT_TRUE(decode::percent("a%2541+b", out));
    EXPECT_EQ(out, "a%41+b");
    EXPECT_TRUE(decode::percent("a+b", out, true));
    EXPECT_EQ(out, "a b");
    EXPECT_TRUE(decode::js_escape("\\ud83d\\ude00\\x41\\n\\\"\\u{1F600}", out));
    EXPECT_EQ(out, "\xF0\x9F\x98\x80"
                   "A\n\"\xF0\x9F\x98\x80");
    EXPECT_TRUE(decode::percent("%u0041%U00e9%u12", out));
    EXPECT_EQ(out, "A\xC3\xA9%u12");
    EXPECT_TRUE(decode::js_escape("\\U00000041\\U0001F600\\x{42}\\x{1F600}", out));
    EXPECT_EQ(out, "A\xF0\x9F\x98\x80"
                   "B\xF0\x9F\x98\x80");
    // Not escapes: too few digits, out of range, no closing brace.
    EXPECT_TRUE(decode::js_escape("\\U0041 \\UFFFFFFFF \\x{} \\x{41", out));
    EXPECT_EQ(out, "U0041 UFFFFFFFF x{} x{41");
    EXPECT_TRUE(decode::html_entities("&lt;&#65;&#x42;&amp;&bogus;", out));
    EXPECT_EQ(out, "<AB&&bogus;");
    EXPECT_TRUE(decode::quoted_printable("a=3Db=\r\nc", out));
    EXPECT_EQ(out, "a=bc");
    EXPECT_TRUE(decode::fold_unicode("g\xE2\x80\x8Bh\xEF\xBD\x90_\xD0\xB0", out));
    EXPECT_EQ(out, "ghp_a");
    EXPECT_FALSE(decode::fold_unicode("plain ascii", out));
    EXPECT_EQ(decode::content("compress", "x", 10, out), decode::inflate_status::unknown);
    EXPECT_EQ(decode::content("gzip", gzip(std::string(1000, 'a')), 100, out),
              decode::inflate_status::over_limit);
    EXPECT_EQ(decode::content("gzip", gzip("abc").substr(0, 8), 100, out),
              decode::inflate_status::error);
}
