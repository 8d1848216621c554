// git pushes (dlp/git.hpp, issue 21), on packs and advertisements made by the real `git`:
// objects named by path, deltas resolved, thin packs refused, receive-pack command lists,
// `no-thin` added to an advertisement, and the variant pipeline finding a secret in a file,
// a commit message and a file name of a push, with no path that holds it in a location.
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/git.hpp"
#include "sluice/dlp/variants.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace sluice::dlp {
namespace {

namespace fs = std::filesystem;

// Runs `cmd` with sh and returns its standard output, bytes as they are.
std::string sh(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr)
        return out;
    char buf[65536];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << cmd;
    return out;
}

std::string pkt(std::string_view payload) {
    char len[5];
    std::snprintf(len, sizeof len, "%04zx", payload.size() + 4);
    return std::string(len, 4) + std::string(payload);
}

// A repository of its own per test, removed afterwards.
class git_repo : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/sluice-git-test-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        git("init -q -b main");
        git("config user.email agent@example.com");
        git("config user.name agent");
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string git(const std::string& args) {
        return sh("git -C '" + dir_.string() + "' " + args + " 2>/dev/null");
    }
    void write(const std::string& path, const std::string& text) {
        fs::create_directories((dir_ / path).parent_path());
        std::ofstream(dir_ / path, std::ios::binary) << text;
    }
    void commit(const std::string& message) {
        git("add -A");
        const std::string file = (dir_ / ".git" / "MSG").string();
        std::ofstream(file) << message;
        git("commit -q -F '" + file + "'");
    }
    // pack-objects over `revs` (one per line, ^ to exclude), as git push sends it.
    std::string pack(const std::string& revs, bool thin) {
        return sh("printf '" + revs + "' | git -C '" + dir_.string() +
                  "' pack-objects -q --stdout --revs" + (thin ? " --thin" : "") +
                  " --delta-base-offset");
    }

    fs::path dir_;
};

using objects = std::map<std::string, std::string>;

objects read_all(std::string_view pack, git::read_status want = git::read_status::ok) {
    objects seen;
    const auto st =
        git::read_pack(pack, 64u << 20, [&](std::string_view where, std::string_view b) {
            seen[std::string(where)] += std::string(b);
            return true;
        });
    EXPECT_EQ(st, want) << git::describe(st);
    return seen;
}

std::string lines(int n, const std::string& extra = "") {
    std::string out;
    for (int i = 0; i < n; ++i)
        out += "line " + std::to_string(i) + " of a file that is long enough to delta well\n";
    return out + extra;
}

TEST_F(git_repo, objects_of_a_pack_are_named_by_path) {
    write("docs/readme.md", "hello\n");
    write("src/deep/main.c", "int main(void) { return 0; }\n");
    commit("first commit\n\nwith a body\n");
    const auto seen = read_all(pack("HEAD\\n", false));
    ASSERT_TRUE(seen.count("git:blob:docs/readme.md"));
    EXPECT_EQ(seen.at("git:blob:docs/readme.md"), "hello\n");
    EXPECT_TRUE(seen.count("git:blob:src/deep/main.c"));
    ASSERT_TRUE(seen.count("git:tree:/"));
    EXPECT_NE(seen.at("git:tree:/").find("docs\n"), std::string::npos);
    EXPECT_TRUE(seen.count("git:tree:src/deep"));
    bool commit_seen = false;
    for (const auto& [where, bytes] : seen)
        if (where.starts_with("git:commit:")) {
            commit_seen = true;
            EXPECT_NE(bytes.find("with a body"), std::string::npos);
            EXPECT_NE(bytes.find("author agent <agent@example.com>"), std::string::npos);
        }
    EXPECT_TRUE(commit_seen);
}

TEST_F(git_repo, a_delta_is_resolved_to_the_whole_file) {
    const std::string secret = "the added line holds " + test::github_token(7) + "\n";
    write("config.txt", lines(200));
    commit("one");
    write("config.txt", lines(200, secret));
    commit("two");
    const std::string p = pack("HEAD\\n", false);
    // pack-objects stored one version as a delta of the other (the pack is far smaller
    // than the two files).
    EXPECT_LT(p.size(), lines(200).size());
    const auto seen = read_all(p);
    ASSERT_TRUE(seen.count("git:blob:config.txt"));
    EXPECT_NE(seen.at("git:blob:config.txt").find(secret), std::string::npos);
}

TEST_F(git_repo, a_thin_pack_is_incomplete_and_a_full_one_reads) {
    write("config.txt", lines(200));
    commit("one");
    write("config.txt", lines(200, "one more line\n"));
    commit("two");
    read_all(pack("HEAD\\n^HEAD~1\\n", true), git::read_status::incomplete);
    const auto seen = read_all(pack("HEAD\\n^HEAD~1\\n", false));
    EXPECT_TRUE(seen.count("git:blob:config.txt"));
}

TEST_F(git_repo, a_cut_or_bent_pack_is_malformed_and_a_budget_holds) {
    write("a.txt", lines(50));
    commit("one");
    const std::string p = pack("HEAD\\n", false);
    read_all(p.substr(0, p.size() / 2), git::read_status::malformed);
    std::string bent = p;
    bent[bent.size() / 2] ^= 0x55;
    read_all(bent, git::read_status::malformed);
    EXPECT_EQ(read_all("not a pack", git::read_status::not_git).size(), 0u);
    const auto st = git::read_pack(p, 100, [](auto, auto) { return true; });
    EXPECT_EQ(st, git::read_status::over_limit);
}

TEST_F(git_repo, a_receive_pack_request_gives_its_commands_then_its_objects) {
    write("a.txt", "a\n");
    commit("one");
    const std::string head = git("rev-parse HEAD").substr(0, 40);
    const std::string zero(40, '0');
    const std::string body = pkt(zero + " " + head + " refs/heads/main" + std::string(1, '\0') +
                                 "report-status side-band-64k push-options agent=git/2\n") +
                             "0000" + pkt("ci.skip\n") + "0000" + pack("HEAD\\n", false);
    objects seen;
    const auto st = git::read_receive_pack(body, 1u << 20, [&](auto where, auto bytes) {
        seen[std::string(where)] += std::string(bytes);
        return true;
    });
    ASSERT_EQ(st, git::read_status::ok) << git::describe(st);
    ASSERT_TRUE(seen.count("git:commands"));
    EXPECT_NE(seen.at("git:commands").find("refs/heads/main"), std::string::npos);
    EXPECT_NE(seen.at("git:commands").find("ci.skip"), std::string::npos);
    EXPECT_TRUE(seen.count("git:blob:a.txt"));
    // git's probe before a large push, and a push that only deletes.
    EXPECT_EQ(git::read_receive_pack("0000", 1 << 20, [](auto, auto) { return true; }),
              git::read_status::ok);
    EXPECT_EQ(git::read_receive_pack(pkt(head + " " + zero + " refs/heads/x\n") + "0000", 1 << 20,
                                     [](auto, auto) { return true; }),
              git::read_status::ok);
    // Bytes after the commands that are not a pack, and a pkt-line cut short.
    EXPECT_EQ(
        git::read_receive_pack(pkt("x\n") + "0000junk", 1 << 20, [](auto, auto) { return true; }),
        git::read_status::malformed);
    EXPECT_EQ(
        git::read_receive_pack(pkt("x\n") + "00ffshort", 1 << 20, [](auto, auto) { return true; }),
        git::read_status::malformed);
    EXPECT_EQ(git::read_receive_pack("00ffshort", 1 << 20, [](auto, auto) { return true; }),
              git::read_status::not_git);
}

TEST_F(git_repo, no_thin_is_added_to_a_real_advertisement) {
    write("a.txt", "a\n");
    commit("one");
    const std::string bare = dir_.string() + "/bare.git";
    sh("git clone -q --bare '" + dir_.string() + "' '" + bare + "' 2>/dev/null");
    const std::string refs = sh("git receive-pack --stateless-rpc --advertise-refs '" + bare + "'");
    const std::string advert = pkt("# service=git-receive-pack\n") + "0000" + refs;
    const auto out = git::advertise_no_thin(advert);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->size(), advert.size() + 8);
    // Every pkt-line still frames: the first ref line ends in " no-thin\n".
    std::string_view in = *out;
    std::vector<std::string> payloads;
    while (!in.empty()) {
        const unsigned len = std::stoul(std::string(in.substr(0, 4)), nullptr, 16);
        ASSERT_LE(len == 0 ? 4u : len, in.size());
        payloads.emplace_back(len == 0 ? "" : in.substr(4, len - 4));
        in.remove_prefix(len == 0 ? 4 : len);
    }
    ASSERT_GE(payloads.size(), 3u);
    EXPECT_TRUE(payloads[2].ends_with(" no-thin\n")) << payloads[2];
    EXPECT_FALSE(git::advertise_no_thin(*out).has_value()); // said once
    EXPECT_FALSE(git::advertise_no_thin(refs).has_value()); // not an advertisement
    EXPECT_FALSE(git::advertise_no_thin("").has_value());
}

class git_push_scan : public git_repo {
protected:
    std::vector<variant_finding> scan_push(const std::string& pack_bytes,
                                           variant_status want = variant_status::ok) {
        static detectors::scanner scanner(test::builtin());
        variant_scanner vs(scanner);
        const std::string body =
            pkt(std::string(40, '0') + " " + std::string(40, '1') + " refs/heads/main" +
                std::string(1, '\0') + "report-status\n") +
            "0000" + pack_bytes;
        std::vector<variant_finding> out;
        EXPECT_EQ(vs.scan_body(body, "application/x-git-receive-pack-request", "", out), want);
        return out;
    }
};

TEST_F(git_push_scan, a_secret_in_a_file_a_message_or_a_file_name_is_found_where_it_is) {
    const std::string token = test::github_token(11);
    write("ci/deploy.env", "GITHUB_TOKEN=" + token + "\n");
    commit("add deploy settings");
    auto found = scan_push(pack("HEAD\\n", false));
    ASSERT_FALSE(found.empty());
    bool token_found = false;
    for (const auto& f : found) {
        EXPECT_EQ(f.location, "git:blob:ci/deploy.env");
        token_found = token_found || f.f.rule_id == "github-pat-classic";
    }
    EXPECT_TRUE(token_found);

    write("ci/deploy.env", "nothing here\n");
    commit("rotate: the old one was " + test::github_token(12));
    found = scan_push(pack("HEAD\\n^HEAD~1\\n", false));
    ASSERT_FALSE(found.empty());
    EXPECT_TRUE(found.front().location.starts_with("git:commit:")) << found.front().location;

    const std::string named = test::github_token(13);
    write("keys/" + named + "/x.txt", "also " + named + "\n");
    commit("a file under a secret name");
    found = scan_push(pack("HEAD\\n^HEAD~1\\n", false));
    ASSERT_FALSE(found.empty());
    for (const auto& f : found)
        EXPECT_EQ(f.location.find(named), std::string::npos) << f.location;
}

TEST_F(git_push_scan, a_clean_push_has_no_finding_and_a_thin_one_is_bad_encoding) {
    write("src/app.py", lines(100));
    commit("clean work");
    write("src/app.py", lines(100, "print('more')\n"));
    commit("more clean work");
    EXPECT_TRUE(scan_push(pack("HEAD\\n", false)).empty());
    scan_push(pack("HEAD\\n^HEAD~1\\n", true), variant_status::bad_encoding);
}

TEST_F(git_push_scan, a_bare_pack_body_is_opened_whatever_its_type) {
    const std::string token = test::github_token(21);
    write("notes.txt", "zipped away: " + token + "\n");
    commit("notes");
    static detectors::scanner scanner(test::builtin());
    variant_scanner vs(scanner);
    std::vector<variant_finding> out;
    const std::string p = pack("HEAD\\n", false);
    ASSERT_EQ(vs.scan_body(p, "application/octet-stream", "", out), variant_status::ok);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out.front().location, "git:blob:notes.txt");
    out.clear();
    variant_scanner again(scanner);
    EXPECT_EQ(again.scan_body(p.substr(0, p.size() - 30), "", "", out),
              variant_status::bad_encoding);
}

} // namespace
} // namespace sluice::dlp
