#include "cli_run.hpp"

#include "sluice/config/settings.hpp"
#include "sluice/proxy/audit_log.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/version.hpp>
#include <hs/hs.h>
#include <openssl/crypto.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

namespace sluice::cli {

namespace {

struct run_args {
    std::optional<std::filesystem::path> config;
    std::optional<std::filesystem::path> data_dir;
};

std::optional<run_args> parse_run_args(int argc, char** argv) {
    run_args a;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        auto value = [&](std::string_view name) -> std::optional<std::string> {
            if (arg == name && i + 1 < argc)
                return std::string(argv[++i]);
            if (arg.starts_with(std::string(name) + "="))
                return std::string(arg.substr(name.size() + 1));
            return std::nullopt;
        };
        if (auto v = value("--config")) {
            a.config = *v;
        } else if (auto d = value("--data-dir")) {
            a.data_dir = *d;
        } else {
            std::cerr << "sluice run: unknown argument '" << arg
                      << "'\nusage: sluice run [--config FILE] [--data-dir DIR]\n";
            return std::nullopt;
        }
    }
    return a;
}

std::expected<config::settings, config::diagnostics> load(const run_args& a) {
    config::load_options opts{a.data_dir};
    if (a.config)
        return config::load_file(*a.config, opts);
    return config::load_string(config::embedded_default_yaml(), "<embedded default>", opts);
}

void print_diagnostics(const config::diagnostics& diags) {
    for (const auto& d : diags)
        std::cerr << d.str() << "\n";
}

void setup_logging(const config::settings& s) {
    auto logger = spdlog::stderr_logger_mt("sluice");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::from_str(s.log_level));
    if (s.log_format == "json")
        spdlog::set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","msg":"%v"})",
                            spdlog::pattern_time_type::utc);
    else
        spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
}

void print_banner(const std::vector<std::string>& addresses, const std::filesystem::path& ca) {
    std::string proxy = "http://" + (addresses.empty() ? std::string("?") : addresses.front());
    std::string c = ca.string();
    std::printf("sluice %s listening on %s\n", SLUICE_VERSION, proxy.c_str());
    for (std::size_t i = 1; i < addresses.size(); ++i)
        std::printf("also listening on http://%s\n", addresses[i].c_str());
    std::printf("CA certificate: %s\n\n", c.c_str());
    std::printf("Point your agent at sluice (paste into its shell):\n");
    std::printf("export HTTPS_PROXY=%s HTTP_PROXY=%s https_proxy=%s http_proxy=%s\n", proxy.c_str(),
                proxy.c_str(), proxy.c_str(), proxy.c_str());
    std::printf("export SSL_CERT_FILE=%s CURL_CA_BUNDLE=%s REQUESTS_CA_BUNDLE=%s\n", c.c_str(),
                c.c_str(), c.c_str());
    std::printf("export NODE_EXTRA_CA_CERTS=%s GIT_SSL_CAINFO=%s\n\n", c.c_str(), c.c_str());
    std::fflush(stdout);
}

} // namespace

int cmd_run(int argc, char** argv) {
    auto args = parse_run_args(argc, argv);
    if (!args)
        return 2;
    auto loaded = load(*args);
    if (!loaded) {
        print_diagnostics(loaded.error());
        return 2;
    }
    auto settings = std::make_shared<const config::settings>(std::move(*loaded));
    setup_logging(*settings);

    std::error_code ec;
    std::filesystem::create_directories(settings->data_dir, ec);
    if (!ec)
        std::filesystem::permissions(settings->data_dir, std::filesystem::perms::owner_all, ec);
    if (ec) {
        std::cerr << "sluice: data dir " << settings->data_dir << ": " << ec.message() << "\n";
        return 3;
    }
    if (auto made = proxy::ensure_ca(settings->ca_cert, settings->ca_key); !made) {
        std::cerr << "sluice: " << made.error() << "\n";
        return 3;
    }
    auto ca = proxy::certificate_authority::load(settings->ca_cert, settings->ca_key);
    if (!ca) {
        std::cerr << "sluice: " << ca.error() << "\n";
        return 3;
    }
    auto audit = proxy::audit_log::open(settings->audit_path, settings->audit_fsync_always);
    if (!audit) {
        std::cerr << "sluice: " << audit.error() << "\n";
        return 3;
    }
    auto srv = proxy::server::create(settings, *ca, std::move(*audit));
    if (!srv) {
        std::cerr << "sluice: " << srv.error() << "\n";
        return 3;
    }
    auto& server = **srv;
    print_banner(server.listening_addresses(), settings->ca_cert);
    spdlog::info("sluice {} started: {} rules, audit {}", SLUICE_VERSION,
                 settings->rules->rules().size(), settings->audit_path.string());

    // Signals on their own io_context: SIGTERM/SIGINT drain and exit 0, SIGHUP reloads.
    boost::asio::io_context signal_ctx(1);
    boost::asio::signal_set signals(signal_ctx, SIGTERM, SIGINT, SIGHUP);
    std::function<void(const boost::system::error_code&, int)> on_signal;
    on_signal = [&](const boost::system::error_code& sec, int sig) {
        if (sec)
            return;
        if (sig == SIGHUP) {
            auto next = load(*args);
            if (!next) {
                spdlog::error("reload rejected: {} problem(s); first: {}", next.error().size(),
                              next.error().empty() ? "" : next.error().front().str());
            } else if (auto pub = server.publish(
                           std::make_shared<const config::settings>(std::move(*next)));
                       !pub) {
                spdlog::error("reload rejected: {}", pub.error());
            } else {
                spdlog::info("configuration reloaded");
            }
            signals.async_wait(on_signal);
            return;
        }
        spdlog::info("signal {}: draining", sig);
        server.stop();
    };
    signals.async_wait(on_signal);
    std::thread signal_thread([&] { signal_ctx.run(); });
    server.run();
    signal_ctx.stop();
    signal_thread.join();
    spdlog::info("stopped");
    return 0;
}

int cmd_check_config(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: sluice check-config FILE\n";
        return 2;
    }
    auto loaded = config::load_file(argv[1]);
    if (!loaded) {
        print_diagnostics(loaded.error());
        return 2;
    }
    const auto& s = *loaded;
    if (std::filesystem::exists(s.ca_cert) || std::filesystem::exists(s.ca_key)) {
        auto ca = proxy::certificate_authority::load(s.ca_cert, s.ca_key);
        if (!ca) {
            std::cerr << argv[1] << ":1:1: ca: " << ca.error() << "\n";
            return 2;
        }
    }
    std::cout << argv[1] << ": ok (" << s.rules->rules().size() << " rules, " << s.listeners.size()
              << " listener(s), " << s.policies.size() << " policies)\n";
    return 0;
}

int cmd_version(int, char**) {
    std::cout << "sluice " << SLUICE_VERSION << "\n"
              << "hyperscan " << hs_version() << "\n"
              << OpenSSL_version(OPENSSL_VERSION) << "\n"
              << "boost " << BOOST_VERSION / 100000 << "." << BOOST_VERSION / 100 % 1000 << "."
              << BOOST_VERSION % 100 << "\n";
    return 0;
}

} // namespace sluice::cli
