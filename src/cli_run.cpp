#include "cli_run.hpp"

#include "sluice/config/settings.hpp"
#include "sluice/proxy/admin_api.hpp"
#include "sluice/proxy/admin_console.hpp"
#include "sluice/proxy/audit_log.hpp"
#include "sluice/proxy/certificate_authority.hpp"
#include "sluice/proxy/control.hpp"
#include "sluice/proxy/fleet_store.hpp"
#include "sluice/proxy/log_limiter.hpp"
#include "sluice/proxy/metrics.hpp"
#include "sluice/proxy/server.hpp"
#include "sluice/proxy/webhook.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <boost/version.hpp>
#include <hs/hs.h>
#include <openssl/crypto.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <expected>
#include <functional>
#include <iostream>
#include <optional>
#include <pthread.h>
#include <string>
#include <thread>

namespace sluice::cli {

namespace {

struct run_args {
    std::optional<std::filesystem::path> config;
    std::optional<std::filesystem::path> data_dir;
    bool help = false;
};

constexpr const char* run_usage =
    "usage: sluice run [--config FILE] [--data-dir DIR]\n"
    "  Runs the proxy on FILE (without it, the embedded default: every public host,\n"
    "  inspected, a finding denies); `sluice check-config FILE` checks a file first.\n";

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
        if (arg == "--help" || arg == "-h") {
            a.help = true;
        } else if (auto v = value("--config")) {
            a.config = *v;
        } else if (auto d = value("--data-dir")) {
            a.data_dir = *d;
        } else if (auto alias = value("--dir")) { // as `sluice ca`
            a.data_dir = *alias;
        } else {
            std::cerr << "sluice run: unknown argument '" << arg << "'\n" << run_usage;
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
    // At most 50 lines a second (bursts of 200) reach stderr: a hostile client that
    // provokes one error line per connection cannot flood the log or the disk under it.
    auto sink = std::make_shared<proxy::rate_limited_sink>(
        std::make_shared<spdlog::sinks::stderr_sink_mt>(), 50.0, 200.0);
    auto logger = std::make_shared<spdlog::logger>("sluice", sink);
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::from_str(s.log_level));
    spdlog::set_formatter(proxy::make_log_formatter(s.log_format == "json"));
}

// Loads, builds and publishes configurations; one at a time. Every trigger (SIGHUP,
// POST /v1/reload, the file watcher) runs here on the control thread, never on an
// io_context serving flows, because building compiles rules.
struct reloader {
    const run_args& args;
    proxy::server& server;
    proxy::metrics& stats;
    std::mutex mutex;
    struct file_sig {
        std::int64_t mtime_ns = -1;
        std::int64_t size = -1;
        std::uint64_t ino = 0;
        bool operator==(const file_sig&) const = default;
    };
    file_sig loaded, seen;
    /// Called with each configuration that took effect (under `mutex`).
    std::function<void(const config::settings&)> on_published = {};

    file_sig current_sig() const {
        file_sig s;
        struct stat st {};
        if (args.config && ::stat(args.config->c_str(), &st) == 0) {
            s.mtime_ns =
                static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
            s.size = st.st_size;
            s.ino = st.st_ino;
        }
        return s;
    }

    struct result {
        bool ok = false;
        std::vector<std::string> problems;
        std::size_t rules = 0;
    };

    result reload(std::string_view trigger) {
        std::lock_guard lock(mutex);
        result r;
        loaded = seen = current_sig();
        auto next = load(args);
        if (!next) {
            for (const auto& d : next.error())
                r.problems.push_back(d.str());
        } else {
            r.rules = next->rules->rules().size();
            for (const auto& w : next->warnings)
                spdlog::warn("reload: {}", w.str());
            auto published = std::make_shared<const config::settings>(std::move(*next));
            if (auto pub = server.publish(published); !pub) {
                r.problems.push_back(pub.error());
            } else {
                r.ok = true;
                if (on_published)
                    on_published(*published);
            }
        }
        stats.on_config_reload(r.ok);
        if (r.ok) {
            spdlog::info("configuration reloaded ({}): {} rules; new flows use it", trigger,
                         r.rules);
        } else {
            spdlog::error("reload ({}) rejected, the previous configuration keeps serving: {} "
                          "problem(s)",
                          trigger, r.problems.size());
            for (const auto& p : r.problems)
                spdlog::error("reload: {}", p);
        }
        return r;
    }

    // The file watcher: a periodic stat (mtime, size, inode: an editor's rename counts)
    // that reloads once the file has changed and then held still for one period, so a
    // half-written file is not loaded.
    void watch_tick() {
        if (!args.config)
            return;
        auto now = current_sig();
        if (now == loaded) {
            seen = now;
            return;
        }
        if (now == seen && now.size >= 0)
            reload("config file changed");
        else
            seen = now;
    }
};

boost::json::object reload_json(const reloader::result& r) {
    boost::json::object o;
    if (r.ok) {
        o["result"] = "ok";
        o["rules"] = r.rules;
    } else {
        o["error"] = "bad_request";
        o["reason"] = "config_invalid";
        boost::json::array a;
        for (const auto& p : r.problems)
            a.emplace_back(p);
        o["problems"] = std::move(a);
    }
    return o;
}

// The host part of a "host:port" setting, brackets removed; empty for a wildcard
// address (0.0.0.0, ::), which no client dials.
std::string host_of(std::string_view address) {
    std::string_view h = address;
    if (h.starts_with('[')) {
        h = h.substr(1, h.find(']') == std::string_view::npos ? h.npos : h.find(']') - 1);
    } else if (auto colon = h.rfind(':'); colon != std::string_view::npos && h.find(':') == colon) {
        h = h.substr(0, colon);
    }
    if (h == "0.0.0.0" || h == "::" || h.empty())
        return {};
    return std::string(h);
}

// NO_PROXY: loopback, and the admin and metrics hosts. Sent through sluice they would be
// refused as private destinations (403 private_destination), so the agent's own local
// services and `curl http://127.0.0.1:9901/healthz` must go direct.
std::string no_proxy_list(const config::settings& s) {
    std::vector<std::string> hosts{"localhost", "127.0.0.1", "::1"};
    for (const auto& address : {s.admin_address, s.metrics_address}) {
        auto h = host_of(address);
        if (!h.empty() && std::find(hosts.begin(), hosts.end(), h) == hosts.end())
            hosts.push_back(h);
    }
    std::string out;
    for (const auto& h : hosts)
        out += (out.empty() ? "" : ",") + h;
    return out;
}

// The start-up banner: where sluice listens, its CA, and the lines that point an agent's
// shell at it (every client the README's client guide covers; deploy/README.md).
void print_banner(const std::vector<std::string>& urls, const config::settings& s) {
    std::string proxy = urls.empty() ? std::string("http://?") : urls.front();
    std::string c = s.ca_cert.string();
    std::string np = no_proxy_list(s);
    std::printf("sluice %s listening on %s\n", SLUICE_VERSION, proxy.c_str());
    for (std::size_t i = 1; i < urls.size(); ++i)
        std::printf("also listening on %s\n", urls[i].c_str());
    std::printf("CA certificate: %s\n\n", c.c_str());
    std::printf("Point your agent at sluice (paste into its shell):\n");
    std::printf("export HTTPS_PROXY=%s HTTP_PROXY=%s https_proxy=%s http_proxy=%s\n", proxy.c_str(),
                proxy.c_str(), proxy.c_str(), proxy.c_str());
    std::printf("# loopback and sluice's admin/metrics addresses go direct: through sluice they "
                "are private destinations (403)\n");
    std::printf("export NO_PROXY=%s no_proxy=%s\n", np.c_str(), np.c_str());
    std::printf("export SSL_CERT_FILE=%s CURL_CA_BUNDLE=%s REQUESTS_CA_BUNDLE=%s PIP_CERT=%s\n",
                c.c_str(), c.c_str(), c.c_str(), c.c_str());
    std::printf("export NODE_EXTRA_CA_CERTS=%s NPM_CONFIG_CAFILE=%s NODE_USE_ENV_PROXY=1\n",
                c.c_str(), c.c_str());
    std::printf("export GIT_SSL_CAINFO=%s\n", c.c_str());
    std::printf(
        "# Node 20's fetch ignores HTTPS_PROXY: setGlobalDispatcher(new EnvHttpProxyAgent()) "
        "from undici (Node >= 24 reads NODE_USE_ENV_PROXY)\n\n");
    std::fflush(stdout);
}

} // namespace

int cmd_run(int argc, char** argv) {
    auto args = parse_run_args(argc, argv);
    if (!args)
        return 2;
    if (args->help) {
        std::cout << run_usage;
        return 0;
    }
    // A file size limit must fail the audit write (EFBIG -> 503), not kill the process.
    std::signal(SIGXFSZ, SIG_IGN);
    // SIGHUP/SIGTERM/SIGINT stay pending until the handlers below are installed: a reload
    // sent while the rules compile (systemctl reload right after start) must not kill
    // the process with the default action. Threads started meanwhile inherit the block,
    // so the signals are delivered later to the control thread only.
    sigset_t control_signals;
    sigemptyset(&control_signals);
    sigaddset(&control_signals, SIGHUP);
    sigaddset(&control_signals, SIGTERM);
    sigaddset(&control_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &control_signals, nullptr);
    auto loaded = load(*args);
    if (!loaded) {
        print_diagnostics(loaded.error());
        return 2;
    }
    auto settings = std::make_shared<const config::settings>(std::move(*loaded));
    setup_logging(*settings);
    for (const auto& w : settings->warnings)
        spdlog::warn("config: {}", w.str());

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
    proxy::audit_options audit_opts;
    audit_opts.fsync_always = settings->audit_fsync_always;
    audit_opts.max_size = settings->audit_max_size;
    if (settings->audit_fsync_interval.count() > 0)
        audit_opts.fsync_interval = settings->audit_fsync_interval;
    // In a fleet every record names the replica that wrote it (its chain), as the store
    // knows it.
    std::string replica;
    if (settings->control_store) {
        try {
            replica = proxy::fleet_store::new_replica_name();
        } catch (const std::exception& e) {
            std::cerr << "sluice: control_store: " << e.what() << "\n";
            return 3;
        }
        audit_opts.replica = replica;
    }
    auto audit = proxy::audit_log::open(settings->audit_path, audit_opts);
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

    auto stats = std::make_shared<proxy::metrics>();
    server.attach_metrics(stats);
    // Flow registry, kill switch (persisted in the data dir) and approvals (issue 7). A
    // damaged kill switch file fails closed: everything killed until revived.
    std::string control_warning;
    auto control = proxy::control::open(settings->data_dir / "killed.json", &control_warning);
    if (!control_warning.empty())
        spdlog::error("{}", control_warning);
    control->attach_metrics(stats);
    server.attach_control(control);
    // control_store (issue 22): the kill switch shared by a fleet of replicas, read before
    // the proxy port opens (fleet_store.hpp).
    std::shared_ptr<proxy::fleet_store> store;
    if (settings->control_store) {
        auto made = proxy::fleet_store::create(*settings->control_store, control, &server.limits(),
                                               replica);
        if (!made) {
            std::cerr << "sluice: control_store: " << made.error() << "\n";
            return 3;
        }
        store = *made;
        stats->set_control_store_source([store] {
            return proxy::metrics::store_status{store->up(), store->errors(), store->replicas()};
        });
        const bool have_last_known = std::filesystem::exists(settings->data_dir / "killed.json");
        if (!store->start(have_last_known))
            spdlog::error("control store not read within {} ms: {}",
                          settings->control_store->connect_timeout.count(),
                          control->store_refusing()
                              ? "every new flow is refused until it is read"
                              : "serving with the last-known kill switch state (killed.json)");
    }
    // supervise.webhook: new approval entries are posted to it (webhook.hpp). A reload can
    // set, change or remove it.
    auto hook = std::make_shared<std::atomic<std::shared_ptr<proxy::webhook>>>();
    auto use_webhook = [hook,
                        &server](const config::settings& s) -> std::expected<void, std::string> {
        auto cur = hook->load();
        if (s.supervise_webhook.empty()) {
            hook->store(nullptr);
            return {};
        }
        if (cur)
            return cur->set_url(s.supervise_webhook);
        auto w =
            proxy::webhook::create(server.admin_context(), s.supervise_webhook, s.upstream_ca_file);
        if (!w)
            return std::unexpected(w.error());
        hook->store(*w);
        return {};
    };
    if (auto w = use_webhook(*settings); !w) {
        std::cerr << "sluice: " << w.error() << "\n";
        return 3;
    }
    // The webhook is posted by the replica that holds the request: once per entry in a
    // fleet too. With a control store every replica lists it and may decide it.
    control->on_new_approval([hook, store](std::string json) {
        if (store)
            store->publish_approval(json);
        if (auto w = hook->load())
            w->post(std::move(json));
    });
    if (store)
        control->on_approval_ended([store](const std::string& id) { store->approval_ended(id); });
    auto exposer = proxy::metrics_exposer::start(stats, settings->metrics_address);
    if (!exposer) {
        std::cerr << "sluice: " << exposer.error() << "\n";
        return 3;
    }
    auto token = proxy::load_or_create_admin_token(settings->admin_token_file);
    if (!token) {
        std::cerr << "sluice: " << token.error() << "\n";
        return 3;
    }
    auto admin = proxy::admin_api::create(server.admin_context(), settings->admin_address,
                                          std::move(*token));
    if (!admin) {
        std::cerr << "sluice: " << admin.error() << "\n";
        return 3;
    }

    // Control thread: signals, reloads and the config file watcher.
    boost::asio::io_context signal_ctx(1);
    reloader reloads{*args, server, *stats, {}, {}, {}};
    reloads.loaded = reloads.seen = reloads.current_sig();
    reloads.on_published = [&use_webhook,
                            started = settings->control_store](const config::settings& s) {
        if (auto w = use_webhook(s); !w)
            spdlog::error("reload: {}; approvals are not posted to the new webhook", w.error());
        // The store is joined once, at start (the URL is not quoted: it holds a password).
        const auto& now = s.control_store;
        if (now.has_value() != started.has_value() ||
            (now && (now->url != started->url || now->key_prefix != started->key_prefix ||
                     now->fail_closed != started->fail_closed || now->ca_file != started->ca_file)))
            spdlog::warn("reload: control_store changed; it takes effect at the next restart "
                         "(the running process keeps the store it started with)");
    };

    namespace net = boost::asio;
    (*admin)->route("GET", "/healthz", false,
                    [](proxy::admin_request) -> net::awaitable<proxy::admin_response> {
                        co_return proxy::admin_response{200, R"({"status":"ok"})"};
                    });
    (*admin)->route(
        "GET", "/readyz", false,
        [&server, store, control](proxy::admin_request) -> net::awaitable<proxy::admin_response> {
            if (!server.ready())
                co_return proxy::admin_error(503, "audit_unavailable",
                                             "not ready: the audit log cannot be written");
            if (store && store->settling())
                co_return proxy::admin_error(
                    503, "control_store_unavailable",
                    "not ready: the control store holds no kill switch state yet; new flows "
                    "are refused while replicas that may hold kills reconnect");
            if (store && control->store_refusing()) // fail_closed, or never read
                co_return proxy::admin_error(
                    503, "control_store_unavailable",
                    "not ready: the control store cannot be read; new flows are refused");
            if (store && !store->up()) // last_known: serving, but say so
                co_return proxy::admin_response{
                    200, R"({"status":"ready","control_store":"unavailable"})"};
            co_return proxy::admin_response{200, R"({"status":"ready"})"};
        });
    (*admin)->route("POST", "/v1/reload", true,
                    [&](proxy::admin_request) -> net::awaitable<proxy::admin_response> {
                        // Build on the control thread; this io_context keeps serving meanwhile and
                        // the timer is cancelled (on this context) when the result is in.
                        auto exec = co_await net::this_coro::executor;
                        auto done = std::make_shared<net::steady_timer>(
                            exec, std::chrono::steady_clock::time_point::max());
                        auto result = std::make_shared<reloader::result>();
                        net::post(signal_ctx, [&reloads, done, result, exec] {
                            *result = reloads.reload("admin API");
                            net::post(exec, [done] { done->cancel(); });
                        });
                        co_await done->async_wait(net::as_tuple(net::use_awaitable));
                        co_return proxy::admin_response{
                            result->ok ? 200u : 422u, boost::json::serialize(reload_json(*result))};
                    });
    proxy::register_console_routes(**admin);
    proxy::register_control_routes(**admin, control, store);
    (*admin)->start();
    // The proxy port opens last: a client (or a readiness probe) that reaches it finds the
    // admin API, metrics and control already up.
    if (auto listening = server.listen(); !listening) {
        std::cerr << "sluice: " << listening.error() << "\n";
        return 3;
    }

    print_banner(server.listening_urls(), *settings);
    spdlog::info("admin API on http://{} (token in {}), metrics on http://{}/metrics",
                 (*admin)->address(), settings->admin_token_file.string(),
                 settings->metrics_address);
    spdlog::info("sluice {} started: {} rules, audit {}", SLUICE_VERSION,
                 settings->rules->rules().size(), settings->audit_path.string());

    // Signals on the control thread: SIGTERM/SIGINT drain and exit 0, SIGHUP reloads.
    boost::asio::signal_set signals(signal_ctx, SIGTERM, SIGINT, SIGHUP);
    std::function<void(const boost::system::error_code&, int)> on_signal;
    on_signal = [&](const boost::system::error_code& sec, int sig) {
        if (sec)
            return;
        if (sig == SIGHUP) {
            reloads.reload("SIGHUP");
            signals.async_wait(on_signal);
            return;
        }
        spdlog::info("signal {}: draining", sig);
        server.stop();
    };
    signals.async_wait(on_signal);
    // Handlers are in place: deliver what arrived during start-up, and accept new ones
    // (the control thread below inherits this thread's mask).
    pthread_sigmask(SIG_UNBLOCK, &control_signals, nullptr);
    boost::asio::steady_timer watch_timer(signal_ctx);
    std::function<void(const boost::system::error_code&)> on_watch;
    on_watch = [&](const boost::system::error_code& wec) {
        if (wec)
            return;
        reloads.watch_tick();
        watch_timer.expires_after(std::chrono::seconds(1));
        watch_timer.async_wait(on_watch);
    };
    if (args->config) {
        watch_timer.expires_after(std::chrono::seconds(1));
        watch_timer.async_wait(on_watch);
    }
    std::thread signal_thread([&] { signal_ctx.run(); });
    server.run();
    signal_ctx.stop();
    signal_thread.join();
    if (store)
        store->stop();
    (*admin)->stop();
    exposer->reset();
    spdlog::info("stopped");
    return 0;
}

int cmd_check_config(int argc, char** argv) {
    constexpr const char* usage = "usage: sluice check-config FILE\n"
                                  "  Checks a configuration: every problem as FILE:LINE:COL, "
                                  "warnings too; exit 0 when it loads.\n";
    if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
        std::cout << usage;
        return 0;
    }
    if (argc != 2) {
        std::cerr << usage;
        return 2;
    }
    auto loaded = config::load_file(argv[1]);
    if (!loaded) {
        print_diagnostics(loaded.error());
        return 2;
    }
    const auto& s = *loaded;
    for (const auto& w : s.warnings)
        std::cerr << w.str() << " (warning)\n";
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
