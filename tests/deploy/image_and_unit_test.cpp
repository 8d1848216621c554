// Static checks of the container image and the host service: the Dockerfile (stages, base
// images, runtime packages against what the built binary links) and the systemd unit.
// Optional tools: systemd-analyze (verify, security), dpkg and ldd (runtime packages);
// each test that needs one skips, naming it, when it is missing.
#include "deploy_test_support.hpp"

namespace {

using namespace sluice_deploy_test;

// ------------------------------------------------------------------ Dockerfile

struct instruction {
    std::string keyword; // upper case
    std::string args;
};

std::vector<instruction> dockerfile() {
    std::istringstream in(read_text(deploy_dir / "Dockerfile"));
    std::vector<instruction> out;
    std::string line, logical;
    while (std::getline(in, line)) {
        if (logical.empty() && (line.empty() || line[0] == '#'))
            continue;
        if (!line.empty() && line.back() == '\\') {
            logical += line.substr(0, line.size() - 1) + " ";
            continue;
        }
        logical += line;
        const auto sp = logical.find_first_of(" \t");
        std::string kw = logical.substr(0, sp);
        std::transform(kw.begin(), kw.end(), kw.begin(), ::toupper);
        out.push_back({kw, sp == std::string::npos ? "" : logical.substr(sp + 1)});
        logical.clear();
    }
    return out;
}

// The instructions of the last stage (after the last FROM).
std::vector<instruction> runtime_stage(const std::vector<instruction>& all) {
    std::vector<instruction> out;
    for (const auto& i : all) {
        if (i.keyword == "FROM")
            out.clear();
        out.push_back(i);
    }
    return out;
}

TEST(dockerfile, multi_stage_debian_non_root_healthcheck_entrypoint) {
    const auto all = dockerfile();
    std::vector<std::string> froms;
    for (const auto& i : all)
        if (i.keyword == "FROM")
            froms.push_back(i.args);
    ASSERT_GE(froms.size(), 2u) << "multi-stage: a build stage and a runtime stage";
    EXPECT_EQ(froms.front().rfind("debian:12 ", 0), 0u) << froms.front();
    const std::string build_stage = froms.front().substr(froms.front().rfind(' ') + 1);
    EXPECT_EQ(froms.back().rfind("debian:12-slim", 0), 0u) << froms.back();

    bool installs_deps = false, builds = false;
    for (const auto& i : all) {
        installs_deps =
            installs_deps ||
            (i.keyword == "RUN" && i.args.find("deploy/install-deps.sh") != std::string::npos);
        builds =
            builds || (i.keyword == "RUN" && i.args.find("cmake --build") != std::string::npos);
    }
    EXPECT_TRUE(installs_deps) << "the build stage uses deploy/install-deps.sh";
    EXPECT_TRUE(builds);

    const auto rt = runtime_stage(all);
    std::string user, healthcheck, entrypoint, cmd, volume;
    bool copies_binary = false;
    std::string config_copied_to;
    for (const auto& i : rt) {
        if (i.keyword == "USER")
            user = i.args;
        if (i.keyword == "HEALTHCHECK")
            healthcheck = i.args;
        if (i.keyword == "ENTRYPOINT")
            entrypoint = i.args;
        if (i.keyword == "CMD")
            cmd = i.args;
        if (i.keyword == "VOLUME")
            volume = i.args;
        if (i.keyword == "COPY" && i.args.find("--from=" + build_stage) != std::string::npos &&
            i.args.find("sluice") != std::string::npos)
            copies_binary = true;
        if (i.keyword == "COPY" && i.args.find("deploy/examples/") != std::string::npos)
            config_copied_to = i.args.substr(i.args.rfind(' ') + 1);
        EXPECT_FALSE(i.keyword == "RUN" && i.args.find("-dev") != std::string::npos)
            << "the runtime stage installs a -dev package: " << i.args;
    }
    EXPECT_TRUE(copies_binary) << "COPY --from=" << build_stage << " the binary";
    ASSERT_FALSE(user.empty()) << "no USER in the runtime stage";
    EXPECT_NE(user.substr(0, user.find(':')), "root");
    EXPECT_NE(user.substr(0, user.find(':')), "0");
    EXPECT_NE(healthcheck.find("CMD"), std::string::npos);
    EXPECT_NE(healthcheck.find("/healthz"), std::string::npos) << healthcheck;
    EXPECT_NE(healthcheck.find("9901"), std::string::npos) << healthcheck;
    EXPECT_EQ(entrypoint, R"(["sluice"])");
    EXPECT_NE(cmd.find(R"("run")"), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("\"" + config_copied_to + "\""), std::string::npos)
        << "CMD runs the config the image ships (" << config_copied_to << "): " << cmd;
    EXPECT_NE(volume.find("/var/lib/sluice"), std::string::npos) << "the data dir is a volume";

    // The shipped container config keeps its state in that volume.
    set_config_environment();
    auto loaded = sluice::config::load_file(deploy_dir / "examples" / "container.yaml");
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->data_dir, "/var/lib/sluice");
    EXPECT_EQ(loaded->audit_path.parent_path(), loaded->data_dir);
    EXPECT_EQ(port_of(loaded->admin_address), "9901") << "the HEALTHCHECK's port";
}

TEST(dockerfile, runtime_packages_cover_every_library_the_binary_links) {
    if (::access(sluice_bin.c_str(), X_OK) != 0)
        GTEST_SKIP() << "the sluice binary is not built at " << sluice_bin;
    if (!have_tool("ldd") || !have_tool("dpkg"))
        GTEST_SKIP() << "ldd or dpkg is missing; the runtime package list is not checked";
#ifdef SLUICE_BINARY_UNLIKE_IMAGE
    // The image builds an optimised, unsanitized binary; a Debug or sanitizer build links
    // other libraries (sanitizer runtimes, Boost.Container), so it says nothing about it.
    GTEST_SKIP() << "this build (Debug or sanitizers) does not link like the image's";
#endif
    std::set<std::string> installed;
    for (const auto& i : runtime_stage(dockerfile())) {
        if (i.keyword != "RUN" || i.args.find("apt-get install") == std::string::npos)
            continue;
        // The words after `apt-get install`, up to the end of that command.
        std::istringstream words(i.args.substr(i.args.find("apt-get install") + 15));
        for (std::string w; words >> w && w != "&&" && w != ";";)
            if (w[0] != '-')
                installed.insert(w);
    }
    ASSERT_TRUE(installed.count("ca-certificates"));
    // Every name is a Debian package (installed here, as the -dev packages pull in the
    // runtime libraries, or known to apt).
    for (const auto& pkg : installed) {
        const auto known = run_command("dpkg-query -W " + pkg + " || apt-cache show " + pkg);
        EXPECT_EQ(known.status, 0) << pkg << " is not a known Debian package:\n" << known.output;
    }
    // Present in debian:12-slim (essential or required by apt), or pulled in by a listed one:
    // the Depends of the listed packages, followed as dpkg has them here (the -dev packages
    // installed them), alternatives included.
    std::set<std::string> in_base{"libc6", "libstdc++6", "libgcc-s1", "libcivetweb1"};
    std::vector<std::string> todo(installed.begin(), installed.end());
    while (!todo.empty()) {
        const std::string pkg = todo.back();
        todo.pop_back();
        const auto deps =
            run_command("dpkg-query -W -f='${Depends},${Pre-Depends}' " + pkg + " 2>/dev/null");
        // "libfoo1 (>= 1.2), libbar2 | libbaz3, libqux:any": each alternative's leading name.
        std::istringstream alts(deps.output);
        for (std::string alt; std::getline(alts, alt, ',');) {
            std::istringstream ors(alt);
            for (std::string one; std::getline(ors, one, '|');) {
                std::istringstream word(one);
                std::string name;
                word >> name;
                name = name.substr(0, name.find(':'));
                if (!name.empty() && !installed.count(name) && in_base.insert(name).second)
                    todo.push_back(name);
            }
        }
    }
    const auto ldd = run_command("ldd " + sluice_bin);
    ASSERT_EQ(ldd.status, 0) << ldd.output;
    std::istringstream lines(ldd.output);
    std::size_t checked = 0;
    for (std::string line; std::getline(lines, line);) {
        const auto arrow = line.find("=> /");
        if (arrow == std::string::npos)
            continue;
        std::string lib = line.substr(arrow + 3);
        lib = lib.substr(0, lib.find(' '));
        // A sanitizer build (SLUICE_SANITIZE) links its runtimes; the image never has them.
        const std::string base = fs::path(lib).filename().string();
        if (base.starts_with("libasan.") || base.starts_with("libubsan.") ||
            base.starts_with("liblsan.") || base.starts_with("libtsan."))
            continue;
        // usrmerge: dpkg may know the file under /lib or /usr/lib, by either name.
        const std::string real = fs::canonical(lib).string();
        std::string tries;
        for (const std::string& p : {lib, real})
            tries += " " + p + (p.rfind("/usr/", 0) == 0 ? " " + p.substr(4) : " /usr" + p);
        const auto owner =
            run_command("for p in" + tries + "; do dpkg -S \"$p\" 2>/dev/null && break; done");
        if (owner.status != 0) {
            ADD_FAILURE() << lib << " belongs to no Debian package: " << owner.output;
            continue;
        }
        std::string pkg = owner.output.substr(0, owner.output.find(':'));
        ++checked;
        EXPECT_TRUE(installed.count(pkg) || in_base.count(pkg))
            << lib << " comes from " << pkg << ", which the runtime stage does not install";
    }
    EXPECT_GE(checked, 15u);
}

// ------------------------------------------------------------------ systemd

std::map<std::string, std::vector<std::string>> unit_keys(const std::string& text) {
    std::map<std::string, std::vector<std::string>> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#' || line[0] == '[')
            continue;
        const auto eq = line.find('=');
        if (eq != std::string::npos)
            out[line.substr(0, eq)].push_back(line.substr(eq + 1));
    }
    return out;
}

TEST(systemd_unit, hardening_state_dirs_and_reload) {
    const auto keys = unit_keys(read_text(deploy_dir / "systemd" / "sluice.service"));
    auto one = [&](const std::string& k) {
        auto it = keys.find(k);
        return it == keys.end() ? std::string("<missing>") : it->second.back();
    };
    EXPECT_EQ(one("NoNewPrivileges"), "yes");
    EXPECT_EQ(one("ProtectSystem"), "strict");
    EXPECT_EQ(one("PrivateTmp"), "yes");
    EXPECT_EQ(one("ProtectHome"), "yes");
    EXPECT_EQ(one("CapabilityBoundingSet"), "") << "an empty bounding set";
    EXPECT_EQ(one("StateDirectory"), "sluice");
    EXPECT_EQ(one("LogsDirectory"), "sluice");
    EXPECT_EQ(one("ExecReload"), "/bin/kill -HUP $MAINPID");
    EXPECT_EQ(one("Restart"), "always") << "any unexpected exit (a signal included) restarts it";
    EXPECT_NE(one("ExecStart").find(" run --config /etc/sluice/sluice.yaml"), std::string::npos);

    // The config the unit runs is deploy/examples/systemd.yaml; its writable paths are the
    // unit's state and log directories (everything else is read-only).
    auto loaded = sluice::config::load_file(deploy_dir / "examples" / "systemd.yaml");
    ASSERT_TRUE(loaded.has_value()) << loaded.error().front().str();
    EXPECT_EQ(loaded->data_dir, "/var/lib/" + one("StateDirectory"));
    EXPECT_EQ(loaded->audit_path.parent_path(), "/var/log/" + one("LogsDirectory"));
    EXPECT_EQ(loaded->ca_cert.parent_path(), loaded->data_dir);
    // What the unit publishes for clients is the CA the config uses.
    bool publishes = false;
    for (const auto& pre : keys.at("ExecStartPre"))
        publishes = publishes ||
                    pre.find(loaded->ca_cert.string() + " /run/sluice/ca.pem") != std::string::npos;
    EXPECT_TRUE(publishes) << "ExecStartPre copies " << loaded->ca_cert << " to /run/sluice/ca.pem";
}

TEST(systemd_unit, systemd_analyze_verify_and_security) {
    if (!have_tool("systemd-analyze"))
        GTEST_SKIP() << "systemd-analyze is not installed; the unit is not verified";
    if (::access(sluice_bin.c_str(), X_OK) != 0)
        GTEST_SKIP() << "the sluice binary is not built at " << sluice_bin;
    // verify checks that every Exec path exists: point the copy at the built binary.
    const fs::path dir = fs::temp_directory_path() / ("sluice-unit-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::string text = read_text(deploy_dir / "systemd" / "sluice.service");
    const std::string installed = "/usr/local/bin/sluice";
    ASSERT_NE(text.find(installed), std::string::npos);
    for (auto at = text.find(installed); at != std::string::npos; at = text.find(installed, at))
        text.replace(at, installed.size(), sluice_bin);
    const fs::path unit = dir / "sluice.service";
    std::ofstream(unit) << text;
    const auto verify = run_command("systemd-analyze verify " + unit.string());
    EXPECT_EQ(verify.status, 0) << verify.output;
    EXPECT_EQ(verify.output, "") << "systemd-analyze verify warns";
    // The same verify does flag a broken unit (so an empty output above means something).
    std::ofstream(dir / "broken.service") << text << "\n[Service]\nNoNewPrivileges=maybe\n";
    EXPECT_NE(run_command("systemd-analyze verify " + (dir / "broken.service").string()).output,
              "");
    // Exposure score (0 best, 10 worst): fail above 2.0.
    const auto sec =
        run_command("systemd-analyze security --offline=yes --threshold=20 " + unit.string());
    if (sec.output.find("Unknown option") != std::string::npos ||
        sec.output.find("unrecognized option") != std::string::npos)
        GTEST_LOG_(INFO) << "systemd-analyze security --offline is not supported here";
    else
        EXPECT_EQ(sec.status, 0) << sec.output;
    fs::remove_all(dir);
}

} // namespace
