// Archives in bodies (dlp/archive.hpp, issue 21), on archives written by libarchive's own
// writer (zip with DEFLATE, tar.gz, tar.xz, 7z, encrypted zip): members found by path,
// nested archives opened, a zip after other bytes, in a multipart part or in base64, and
// what cannot be read whole refused; no member name that holds a secret in a location.
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/archive.hpp"
#include "sluice/dlp/body_stream.hpp"
#include "sluice/dlp/variants.hpp"

#include "test_support.hpp"
#include "variants/coders.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sluice::dlp {
namespace {

using files = std::vector<std::pair<std::string, std::string>>;

la_ssize_t append(struct archive*, void* out, const void* buf, size_t n) {
    static_cast<std::string*>(out)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
}

// An archive written by libarchive: `format` "zip", "pax", "7zip"; `filter` "gzip", "xz".
std::string make(const char* format, const files& members, const char* filter = nullptr,
                 const char* options = nullptr, const char* passphrase = nullptr) {
    std::string out;
    struct archive* a = archive_write_new();
    EXPECT_EQ(archive_write_set_format_by_name(a, format), ARCHIVE_OK);
    if (filter != nullptr) {
        EXPECT_EQ(archive_write_add_filter_by_name(a, filter), ARCHIVE_OK);
    }
    if (options != nullptr) {
        EXPECT_EQ(archive_write_set_options(a, options), ARCHIVE_OK) << archive_error_string(a);
    }
    if (passphrase != nullptr) {
        EXPECT_EQ(archive_write_set_passphrase(a, passphrase), ARCHIVE_OK);
    }
    archive_write_set_bytes_in_last_block(a, 1);
    EXPECT_EQ(archive_write_open(a, &out, nullptr, append, nullptr), ARCHIVE_OK);
    for (const auto& [name, data] : members) {
        struct archive_entry* e = archive_entry_new();
        archive_entry_set_pathname(e, name.c_str());
        archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        EXPECT_EQ(archive_write_header(a, e), ARCHIVE_OK) << archive_error_string(a);
        EXPECT_EQ(archive_write_data(a, data.data(), data.size()),
                  static_cast<la_ssize_t>(data.size()));
        archive_entry_free(e);
    }
    EXPECT_EQ(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    return out;
}

std::string filler(int n) {
    std::string out;
    for (int i = 0; i < n; ++i)
        out += "module.exports.setting" + std::to_string(i) + " = 'a value that compresses';\n";
    return out;
}

std::vector<variant_finding> scan(std::string_view body, std::string_view type = "",
                                  variant_status want = variant_status::ok) {
    static detectors::scanner scanner(test::builtin());
    variant_scanner vs(scanner);
    std::vector<variant_finding> out;
    EXPECT_EQ(vs.scan_body(body, type, "", out), want);
    return out;
}

bool has(const std::vector<variant_finding>& found, std::string_view rule,
         std::string_view location, std::string_view variant = {}) {
    for (const auto& f : found)
        if (f.f.rule_id == rule && f.location == location &&
            (variant.empty() || f.variant == variant))
            return true;
    return false;
}

TEST(archive_reader, members_then_names_in_order) {
    const std::string zip = make("zip", {{"a/one.txt", "first"}, {"b/two.txt", "second"}});
    std::vector<std::string> seen;
    std::string format;
    const auto st = archive::read_archives(
        zip, 1 << 20, 4, [&](std::string_view f, std::string_view m, std::string_view b) {
            format = f;
            seen.push_back(std::string(m) + "=" + std::string(b));
            return true;
        });
    EXPECT_EQ(st, archive::read_status::ok) << archive::describe(st);
    EXPECT_EQ(format, "zip");
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0], "a/one.txt=first");
    EXPECT_EQ(seen[1], "b/two.txt=second");
    EXPECT_EQ(seen[2], "=a/one.txt\nb/two.txt\n");
}

TEST(archive_reader, budget_and_not_archives) {
    const std::string zip = make("zip", {{"big.txt", filler(2000)}});
    const auto none = [](std::string_view, std::string_view, std::string_view) { return true; };
    EXPECT_EQ(archive::read_archives(zip, 1000, 4, none), archive::read_status::over_limit);
    EXPECT_EQ(archive::read_archives("plain text, no archive", 1 << 20, 4, none),
              archive::read_status::not_archive);
    // Text that starts like a cpio header, and binary noise with "PK\3\4" in it, are not
    // archives; a real zip signature that cannot be read is.
    EXPECT_EQ(archive::read_archives("070707 is a number", 1 << 20, 4, none),
              archive::read_status::not_archive);
    EXPECT_EQ(
        archive::read_archives(std::string("\x01\x02PK\x03\x04\xff\xff", 8), 1 << 20, 4, none),
        archive::read_status::not_archive);
    EXPECT_EQ(archive::read_archives(zip.substr(0, zip.size() / 2), 1 << 20, 4, none),
              archive::read_status::malformed);
    EXPECT_FALSE(archive::may_hold_archive("{\"json\": true}"));
    EXPECT_TRUE(archive::may_hold_archive(zip));
}

TEST(archive_scan, a_token_in_a_zip_tar_gz_tar_xz_or_7z_member_is_found_where_it_is) {
    const std::string token = test::github_token(31);
    const files members = {{"package/index.js", filler(50) + "const t = '" + token + "';\n"},
                           {"package/README.md", "clean\n"}};
    const std::string zip = make("zip", members);
    // DEFLATE: the token is not in the raw bytes of the zip.
    ASSERT_EQ(zip.find(token), std::string::npos);
    EXPECT_TRUE(
        has(scan(zip, "application/zip"), "github-pat-classic", "archive:package/index.js", "zip"));
    // tar stores members as they are: the gzip's inflated bytes already hold the token,
    // and are scanned as text before the members; the finding still names the member.
    const auto tgz = scan(make("pax", members, "gzip"), "application/gzip");
    EXPECT_TRUE(has(tgz, "github-pat-classic", "archive:package/index.js", "gzip>tar"));
    EXPECT_FALSE(has(tgz, "github-pat-classic", "body"));
    EXPECT_TRUE(has(scan(make("pax", members, "xz"), ""), "github-pat-classic",
                    "archive:package/index.js", "xz>tar"));
    EXPECT_TRUE(has(scan(make("7zip", members), "application/octet-stream"), "github-pat-classic",
                    "archive:package/index.js", "7zip"));
    EXPECT_TRUE(scan(make("zip", {{"package/README.md", filler(50)}})).empty());
}

TEST(archive_scan, archives_inside_archives_are_opened_to_the_depth_limit) {
    const std::string token = test::github_token(32);
    const std::string inner = make("zip", {{"creds.txt", "token " + token + "\n"}});
    const std::string outer = make("pax", {{"bundle.zip", inner}}, "gzip");
    EXPECT_TRUE(
        has(scan(outer), "github-pat-classic", "archive:bundle.zip/creds.txt", "gzip>tar>zip"));
    std::string nested = inner;
    for (int i = 0; i < 20; ++i)
        nested = make("zip", {{"layer.zip", nested}});
    scan(nested, "", variant_status::over_budget);
}

TEST(archive_scan, a_zip_after_other_bytes_in_a_part_or_in_base64_is_opened) {
    const std::string token = test::github_token(33);
    const std::string zip = make("zip", {{"notes.txt", filler(20) + token + "\n"}});
    EXPECT_TRUE(has(scan("some leading junk\n" + zip + "\ntrailing"), "github-pat-classic",
                    "archive:notes.txt"));
    const std::string multipart = "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; "
                                  "filename=\"n.zip\"\r\nContent-Type: application/zip\r\n\r\n" +
                                  zip + "\r\n--XyZ--\r\n";
    EXPECT_TRUE(has(scan(multipart, "multipart/form-data; boundary=XyZ"), "github-pat-classic",
                    "archive:notes.txt", "multipart>zip"));
    const std::string b64 = test_coders::base64(zip);
    const auto found = scan("{\"attachment\": \"" + b64 + "\"}", "application/json");
    EXPECT_TRUE(has(found, "github-pat-classic", "archive:notes.txt")) << found.size();
}

TEST(archive_scan, encrypted_or_cut_archives_are_refused) {
    const files members = {{"secret.txt", filler(20)}};
    scan(make("zip", members, nullptr, "zip:encryption=traditional", "pw"), "",
         variant_status::bad_encoding);
    const std::string zip = make("zip", members);
    scan(zip.substr(0, zip.size() * 2 / 3), "", variant_status::bad_encoding);
    const std::string seven = make("7zip", members);
    scan(seven.substr(0, seven.size() / 2), "", variant_status::bad_encoding);
}

TEST(archive_scan, a_member_whose_name_holds_a_secret_is_not_named) {
    const std::string in_name = test::github_token(34);
    const std::string in_data = test::github_token(35);
    const auto found =
        scan(make("zip", {{"keys/" + in_name + ".txt", filler(20) + in_data + "\n"}}));
    // The name is stored as it is in the zip (found in the body, then reported from the
    // list of names); the data is deflated and found in the member, whose location does
    // not repeat the name.
    EXPECT_TRUE(has(found, "github-pat-classic", "archive:[redacted]"));
    EXPECT_TRUE(has(found, "github-pat-classic", "archive:[names]"));
    for (const auto& f : found) {
        EXPECT_EQ(f.location.find(in_name), std::string::npos) << f.location;
        EXPECT_EQ(f.location.find(in_data), std::string::npos) << f.location;
    }
    // Nor an inner member whose outer archive's name holds one.
    const std::string inner = make("zip", {{"x.txt", filler(20) + in_data + "\n"}});
    const auto nested = scan(make("zip", {{in_name + ".zip", inner}}));
    EXPECT_TRUE(has(nested, "github-pat-classic", "archive:[redacted]/x.txt") ||
                has(nested, "github-pat-classic", "archive:[redacted]"));
    for (const auto& f : nested)
        EXPECT_EQ(f.location.find(in_name), std::string::npos) << f.location;
}

TEST(archive_scan, a_zip_relayed_as_a_stream_is_not_released_unread) {
    // dlp.large_bodies: stream: every window goes through the pipeline, and a window with
    // a zip header in it holds a zip cut by the window's end: refused, not let through
    // with its deflated members unread.
    files members;
    for (int i = 0; i < 40; ++i) {
        std::string body;
        for (unsigned k = 0; body.size() < 40000; ++k)
            body += std::to_string((k * 2654435761u + i) % 1000003) + " event\n";
        members.emplace_back("log" + std::to_string(i) + ".txt", body);
    }
    members.emplace_back("z.txt", "token " + test::github_token(36) + "\n");
    const std::string zip = make("zip", members);
    ASSERT_GT(zip.size(), 256u * 1024);
    static detectors::scanner scanner(test::builtin());
    policy pol;
    body_stream bs(pol, scanner, {}, "", 64 * 1024, 8 * 1024);
    verdict last;
    for (std::size_t i = 0; i < zip.size(); i += 64 * 1024) {
        auto r = bs.feed(std::string_view(zip).substr(i, 64 * 1024), i + 64 * 1024 >= zip.size());
        last = r.v;
        if (r.v.kind != verdict_kind::forward)
            break;
        EXPECT_LT(r.releasable, zip.size());
    }
    EXPECT_NE(last.kind, verdict_kind::forward);
    EXPECT_EQ(last.reason, "bad_encoding");
}

} // namespace
} // namespace sluice::dlp
