#include "cli_ca.hpp"

#include "sluice/config/settings.hpp"
#include "sluice/proxy/certificate_authority.hpp"

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace sluice::cli {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view usage_text =
    "usage: sluice ca init [--data-dir DIR | --config FILE]   create a local CA (DIR/ca.pem, "
    "DIR/ca.key)\n"
    "       sluice ca path [--data-dir DIR | --config FILE]   print the CA certificate path\n"
    "DIR defaults to the data directory ($XDG_DATA_HOME/sluice or ~/.local/share/sluice), "
    "as for\n`sluice run`; --dir is an alias of --data-dir. With --config the CA paths come "
    "from the\nconfig's `ca` and `data_dir` keys. `ca path` exits 2 when there is no CA yet.\n";

int usage_error(std::string_view message) {
    std::cerr << "sluice ca: " << message << "\n" << usage_text;
    return 2;
}

struct ca_paths {
    fs::path cert;
    fs::path key;
};

// Absolute paths: the printed certificate path is pasted into environment variables that
// other programs read from other working directories.
fs::path absolute_or_same(const fs::path& p) {
    std::error_code ec;
    fs::path a = fs::absolute(p, ec);
    return ec ? p : a.lexically_normal();
}

} // namespace

int cmd_ca(int argc, char** argv) {
    if (argc < 2)
        return usage_error("missing subcommand");
    std::string_view sub = argv[1];
    if (sub == "-h" || sub == "--help" || sub == "help") {
        std::cout << usage_text;
        return 0;
    }
    if (sub != "init" && sub != "path")
        return usage_error("unknown subcommand '" + std::string(sub) + "'");

    std::optional<fs::path> dir;
    std::optional<fs::path> config_file;
    for (int i = 2; i < argc; ++i) {
        std::string_view arg = argv[i];
        auto take_value = [&](std::string_view flag) -> std::optional<std::string> {
            if (arg == flag) {
                if (i + 1 >= argc)
                    return std::nullopt;
                return std::string(argv[++i]);
            }
            return std::string(arg.substr(flag.size() + 1)); // --flag=VALUE
        };
        if (arg == "-h" || arg == "--help") {
            std::cout << usage_text;
            return 0;
        }
        // --data-dir as on `sluice run` and the admin commands; --dir kept as an alias.
        std::string_view dir_flag = arg.starts_with("--data-dir") ? "--data-dir" : "--dir";
        if (arg == dir_flag || arg.starts_with(std::string(dir_flag) + "=")) {
            auto v = take_value(dir_flag);
            if (!v || v->empty())
                return usage_error(std::string(dir_flag) + " needs a directory");
            dir = *v;
        } else if (arg == "--config" || arg.starts_with("--config=")) {
            auto v = take_value("--config");
            if (!v || v->empty())
                return usage_error("--config needs a file");
            config_file = *v;
        } else {
            return usage_error("unexpected argument '" + std::string(arg) + "'");
        }
    }
    if (dir && config_file)
        return usage_error("--data-dir and --config are mutually exclusive");

    ca_paths paths;
    if (config_file) {
        auto s = config::load_file(*config_file);
        if (!s) {
            for (const auto& d : s.error())
                std::cerr << d.str() << "\n";
            return 2;
        }
        paths = {s->ca_cert, s->ca_key};
    } else {
        fs::path base = dir ? *dir : config::default_data_dir();
        paths = {base / "ca.pem", base / "ca.key"};
    }
    paths.cert = absolute_or_same(paths.cert);
    paths.key = absolute_or_same(paths.key);

    std::error_code ec;
    if (sub == "path") {
        if (!fs::exists(paths.cert, ec)) {
            // Exit 2 (input error): the data dir holds no CA yet. `sluice run` creates one
            // on first start in the same place, so either command fixes it.
            std::string where = dir           ? " --data-dir " + absolute_or_same(*dir).string()
                                : config_file ? " --config " + config_file->string()
                                              : std::string();
            std::cerr << "sluice ca: no CA certificate at " << paths.cert.string()
                      << " yet; create one with `sluice ca init" << where
                      << "` (or start `sluice run" << where << "` once)\n";
            return 2;
        }
        std::cout << paths.cert.string() << "\n";
        return 0;
    }

    bool existed = fs::exists(paths.cert, ec) && fs::exists(paths.key, ec);
    auto r = proxy::ensure_ca(paths.cert, paths.key);
    if (!r) {
        std::cerr << "sluice ca: " << r.error() << "\n";
        return 3;
    }
    // Loading proves the pair is usable (key permissions, key matches certificate), so an
    // existing CA that `sluice run` would refuse is reported now rather than at start.
    auto loaded = proxy::certificate_authority::load(paths.cert, paths.key, 1);
    if (!loaded) {
        std::cerr << "sluice ca: " << loaded.error() << "\n";
        return 3;
    }
    if (existed)
        std::cerr << "sluice ca: a CA already exists at " << paths.cert.string()
                  << " (left unchanged)\n";
    else
        std::cerr << "sluice ca: created CA certificate " << paths.cert.string() << " and key "
                  << paths.key.string() << " (mode 0600)\n";
    std::cout << paths.cert.string() << "\n";
    return 0;
}

} // namespace sluice::cli
