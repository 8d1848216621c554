#include "cli_admin.hpp"

#include "sluice/config/settings.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <pwd.h>
#include <set>
#include <string>
#include <string_view>
#include <sys/ioctl.h>
#include <unistd.h>
#include <vector>

namespace sluice::cli {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;

constexpr std::string_view default_admin = "http://127.0.0.1:9901";
// A flows listing of many thousand flows is a few MiB; anything larger is not an answer
// from sluice.
constexpr std::uint64_t max_answer_bytes = 64ull << 20;

constexpr const char* usage_text =
    R"(usage: sluice approvals list [options]
       sluice approvals approve ID [--reason R] [--by B] [options]
       sluice approvals deny ID [--reason R] [--by B] [options]
       sluice flows [options]
       sluice kill IDENTITY|--all [options]
       sluice revive IDENTITY|--all [options]

options:
  --admin URL        admin API of a sluice replica (default $SLUICE_ADMIN_URL, else
                     http://127.0.0.1:9901); repeat it or separate URLs with commas; a host
                     name resolving to several addresses (a Kubernetes headless Service)
                     means every address, on the same port
  --token-file FILE  bearer token file (default $SLUICE_ADMIN_TOKEN, else admin.token in
                     the data dir)
  --data-dir DIR     the data dir `sluice run --data-dir DIR` uses (default
                     $XDG_DATA_HOME/sluice or ~/.local/share/sluice; --dir is an alias)
  --json             print JSON instead of tables
  --timeout D        per-replica deadline, e.g. 500ms, 10s (default 10s)
  --by B             who decides (approve/deny; default USER@HOST)
  --reason R         why (approve/deny; recorded with the decision)

exit codes: 0 success, 2 usage or input error, 3 runtime failure (a replica unreachable,
token refused, API error)
)";

int usage_error(std::string_view cmd, std::string_view message) {
    std::cerr << "sluice " << cmd << ": " << message << "\n" << usage_text;
    return 2;
}

// ------------------------------------------------------------------ options

struct options {
    std::vector<std::string> admin;
    std::optional<std::string> token_file;
    std::optional<std::string> data_dir;
    bool json = false;
    bool all = false;
    std::chrono::milliseconds timeout{10'000};
    std::optional<std::string> by;
    std::optional<std::string> reason;
    std::vector<std::string> positional;
};

std::optional<std::chrono::milliseconds> parse_duration(std::string_view s) {
    std::size_t i = 0;
    std::uint64_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && n < 1'000'000'000)
        n = n * 10 + static_cast<unsigned>(s[i++] - '0');
    if (i == 0)
        return std::nullopt;
    std::string_view unit = s.substr(i);
    std::uint64_t ms = 0;
    if (unit == "ms")
        ms = n;
    else if (unit == "s" || unit.empty())
        ms = n * 1000;
    else if (unit == "m")
        ms = n * 60'000;
    else
        return std::nullopt;
    if (ms == 0 || ms > 3'600'000)
        return std::nullopt;
    return std::chrono::milliseconds(ms);
}

// Parses argv[1..]: options anywhere, "--name value" or "--name=value"; `--` ends options.
// `allowed` lists the value-less flags and value options this command takes.
std::expected<options, std::string> parse_options(int argc, char** argv, int first,
                                                  std::set<std::string_view> allowed) {
    options o;
    bool only_positional = false;
    for (int i = first; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (only_positional || arg.size() < 2 || arg[0] != '-') {
            o.positional.emplace_back(arg);
            continue;
        }
        if (arg == "--") {
            only_positional = true;
            continue;
        }
        std::string_view name = arg;
        std::optional<std::string> inline_value;
        if (auto eq = arg.find('='); eq != std::string_view::npos) {
            name = arg.substr(0, eq);
            inline_value = std::string(arg.substr(eq + 1));
        }
        if (!allowed.contains(name))
            return std::unexpected("unknown option '" + std::string(name) + "'");
        auto value = [&]() -> std::expected<std::string, std::string> {
            if (inline_value)
                return *inline_value;
            if (i + 1 >= argc)
                return std::unexpected(std::string(name) + " needs a value");
            return std::string(argv[++i]);
        };
        if (name == "--json" || name == "--all") {
            if (inline_value)
                return std::unexpected(std::string(name) + " takes no value");
            (name == "--json" ? o.json : o.all) = true;
            continue;
        }
        auto v = value();
        if (!v)
            return std::unexpected(v.error());
        if (name == "--admin") {
            std::string_view list = *v;
            while (!list.empty()) {
                auto comma = list.find(',');
                auto item = list.substr(0, comma);
                while (!item.empty() && item.front() == ' ')
                    item.remove_prefix(1);
                while (!item.empty() && item.back() == ' ')
                    item.remove_suffix(1);
                if (!item.empty())
                    o.admin.emplace_back(item);
                if (comma == std::string_view::npos)
                    break;
                list.remove_prefix(comma + 1);
            }
            if (o.admin.empty())
                return std::unexpected("--admin needs a URL");
        } else if (name == "--token-file") {
            o.token_file = *v;
        } else if (name == "--data-dir" || name == "--dir") {
            if (v->empty())
                return std::unexpected(std::string(name) + " needs a directory");
            o.data_dir = *v;
        } else if (name == "--timeout") {
            auto d = parse_duration(*v);
            if (!d)
                return std::unexpected("--timeout '" + *v +
                                       "': expected a duration such as 500ms or 10s (at most 1h)");
            o.timeout = *d;
        } else if (name == "--by") {
            o.by = *v;
        } else if (name == "--reason") {
            o.reason = *v;
        }
    }
    return o;
}

// ------------------------------------------------------------------ token

// Trailing whitespace (the newline `sluice run` writes) is dropped. A token that cannot be
// sent as a header value is refused without showing it.
std::expected<std::string, std::string> clean_token(std::string token, const std::string& origin) {
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' ||
                              token.back() == '\t'))
        token.pop_back();
    if (token.empty())
        return std::unexpected(origin + " is empty");
    for (unsigned char c : token)
        if (c < 0x21 || c == 0x7f)
            return std::unexpected(origin + " holds spaces or control characters; expected "
                                            "the token alone on one line");
    return token;
}

std::expected<std::string, std::string> read_token_file(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return std::unexpected("cannot read token file " + file + ": " +
                               std::strerror(errno ? errno : ENOENT));
    std::string token;
    std::array<char, 4096> buf{};
    while (in.read(buf.data(), buf.size()) || in.gcount() > 0) {
        token.append(buf.data(), static_cast<std::size_t>(in.gcount()));
        if (token.size() > 64 * 1024)
            return std::unexpected("token file " + file + " is larger than 64 KiB");
    }
    if (in.bad())
        return std::unexpected("cannot read token file " + file);
    return clean_token(std::move(token), "token file " + file);
}

std::expected<std::string, std::string> find_token(const options& o) {
    if (o.token_file)
        return read_token_file(*o.token_file);
    if (const char* env = std::getenv("SLUICE_ADMIN_TOKEN"); env && *env)
        return clean_token(env, "SLUICE_ADMIN_TOKEN");
    // `sluice run` writes its token to admin.token in its data dir (unless the config's
    // admin.token_file says otherwise): with the same --data-dir (or none, on a laptop)
    // the admin commands work without any other option.
    auto fallback = (o.data_dir ? std::filesystem::path(*o.data_dir) : config::default_data_dir()) /
                    "admin.token";
    std::error_code ec;
    if (o.data_dir || std::filesystem::exists(fallback, ec))
        return read_token_file(fallback.string());
    return std::unexpected("no admin token: no " + fallback.string() +
                           "; pass --data-dir DIR (the data dir of `sluice run`), "
                           "--token-file FILE or set SLUICE_ADMIN_TOKEN");
}

// ------------------------------------------------------------------ replicas

struct admin_target {
    std::string url;  ///< as given (normalised with http://)
    std::string host; ///< name or IP address, no brackets
    bool host_is_ip = false;
    std::uint16_t port = 80;
    std::string base_path; ///< "" or "/prefix" without trailing '/'
};

std::expected<admin_target, std::string> parse_admin_url(std::string_view given) {
    std::string text(given);
    if (text.find("://") == std::string::npos)
        text = "http://" + text;
    auto parsed = boost::urls::parse_uri(text);
    if (!parsed)
        return std::unexpected("--admin '" + std::string(given) + "': not a URL");
    const auto& u = *parsed;
    std::string scheme(u.scheme());
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (scheme != "http")
        return std::unexpected("--admin '" + std::string(given) +
                               "': the admin API speaks plain http:// (keep it on loopback or "
                               "a private network)");
    if (u.has_userinfo())
        return std::unexpected("--admin '" + std::string(given) +
                               "': no user info in the URL; the token comes from "
                               "--token-file or SLUICE_ADMIN_TOKEN");
    if (u.has_query() || u.has_fragment())
        return std::unexpected("--admin '" + std::string(given) + "': no query or fragment");
    admin_target t;
    t.url = text;
    switch (u.host_type()) {
    case boost::urls::host_type::ipv4:
        t.host = u.host_ipv4_address().to_string();
        t.host_is_ip = true;
        break;
    case boost::urls::host_type::ipv6:
        t.host = u.host_ipv6_address().to_string();
        t.host_is_ip = true;
        break;
    case boost::urls::host_type::name:
        t.host = u.host_name();
        break;
    default:
        return std::unexpected("--admin '" + std::string(given) + "': no usable host");
    }
    if (t.host.empty())
        return std::unexpected("--admin '" + std::string(given) + "': no host");
    if (u.has_port()) {
        auto p = u.port_number();
        if (p == 0)
            return std::unexpected("--admin '" + std::string(given) + "': bad port");
        t.port = p;
    }
    t.base_path = std::string(u.encoded_path());
    while (!t.base_path.empty() && t.base_path.back() == '/')
        t.base_path.pop_back();
    return t;
}

/// One admin API to talk to: a resolved address (or a name that failed to resolve).
struct replica {
    std::string label; ///< "127.0.0.1:9901", "[::1]:9901", or the URL when unresolved
    std::optional<tcp::endpoint> endpoint;
    std::string host_header;
    std::string base_path;
    std::string resolve_error; ///< set when endpoint is empty
};

std::string endpoint_label(const tcp::endpoint& ep) {
    auto a = ep.address();
    return a.is_v6() ? "[" + a.to_string() + "]:" + std::to_string(ep.port())
                     : a.to_string() + ":" + std::to_string(ep.port());
}

std::expected<std::vector<replica>, std::string> find_replicas(const options& o) {
    std::vector<std::string> urls = o.admin;
    if (urls.empty()) {
        const char* env = std::getenv("SLUICE_ADMIN_URL");
        urls.emplace_back(env && *env ? env : default_admin);
    }
    std::vector<admin_target> targets;
    for (const auto& u : urls) {
        auto t = parse_admin_url(u);
        if (!t)
            return std::unexpected(t.error());
        targets.push_back(std::move(*t));
    }
    net::io_context ctx;
    tcp::resolver resolver(ctx);
    std::vector<replica> out;
    std::set<tcp::endpoint> seen;
    for (const auto& t : targets) {
        std::string host_header =
            t.host_is_ip && t.host.find(':') != std::string::npos ? "[" + t.host + "]" : t.host;
        if (t.port != 80)
            host_header += ":" + std::to_string(t.port);
        boost::system::error_code ec;
        // Every address of the name: each is one replica (a headless Service has one
        // A/AAAA record per ready pod).
        auto results =
            resolver.resolve(t.host, std::to_string(t.port), tcp::resolver::numeric_service, ec);
        if (ec || results.empty()) {
            out.push_back(replica{t.url, std::nullopt, host_header, t.base_path,
                                  "cannot resolve " + t.host + ": " +
                                      (ec ? ec.message() : std::string("no address"))});
            continue;
        }
        for (const auto& r : results) {
            tcp::endpoint ep = r.endpoint();
            if (!seen.insert(ep).second)
                continue;
            out.push_back(replica{endpoint_label(ep), ep, host_header, t.base_path, {}});
        }
    }
    return out;
}

// ------------------------------------------------------------------ HTTP exchange

struct outcome {
    bool answered = false; ///< an HTTP answer arrived
    unsigned status = 0;
    json::value body;  ///< parsed JSON (null when not JSON)
    std::string error; ///< transport or protocol failure, or the API's error summary
};

struct call {
    http::verb verb = http::verb::get;
    std::string path; ///< "/v1/..."
    std::string body; ///< JSON for POST
};

// GCC 12 flags Asio's coroutine frame operator delete as mismatched with its operator new
// (a known false positive: both are awaitable_frame_base's own, sized pair).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
net::awaitable<void> exchange(const replica* r, call c, const std::string* token,
                              std::chrono::milliseconds timeout, outcome* out) {
    constexpr auto tuple = net::as_tuple(net::use_awaitable);
    beast::tcp_stream stream(co_await net::this_coro::executor);
    // One deadline for connect, write and read together.
    stream.expires_after(timeout);
    auto [cec] = co_await stream.async_connect(*r->endpoint, tuple);
    if (cec) {
        out->error = cec == beast::error::timeout ? "no answer within the timeout"
                                                  : "unreachable: " + cec.message();
        co_return;
    }
    http::request<http::string_body> req{c.verb, r->base_path + c.path, 11};
    req.set(http::field::host, r->host_header);
    req.set(http::field::user_agent, "sluice-cli/" SLUICE_VERSION);
    req.set(http::field::accept, "application/json");
    req.set(http::field::authorization, "Bearer " + *token);
    if (c.verb == http::verb::post) {
        req.set(http::field::content_type, "application/json");
        req.body() = c.body;
    }
    req.keep_alive(false);
    req.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, req, tuple);
    if (wec) {
        out->error = wec == beast::error::timeout ? "no answer within the timeout"
                                                  : "sending the request: " + wec.message();
        co_return;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(max_answer_bytes);
    auto [rec, rn] = co_await http::async_read(stream, buf, parser, tuple);
    if (rec) {
        out->error = rec == beast::error::timeout ? "no answer within the timeout"
                                                  : "reading the answer: " + rec.message();
        co_return;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    const auto& res = parser.get();
    out->answered = true;
    out->status = res.result_int();
    boost::system::error_code jec;
    out->body = json::parse(res.body(), jec);
    if (jec)
        out->body = nullptr;
    if (out->status == 401) {
        out->error = "the admin API refused the token (401 unauthorized); check --token-file "
                     "or SLUICE_ADMIN_TOKEN";
    } else if (out->status < 200 || out->status > 299) {
        std::string reason, message;
        if (const auto* o = out->body.if_object()) {
            if (const auto* v = o->if_contains("reason"); v && v->is_string())
                reason = v->as_string();
            if (const auto* v = o->if_contains("message"); v && v->is_string())
                message = v->as_string();
        }
        out->error = "HTTP " + std::to_string(out->status) + (reason.empty() ? "" : " " + reason) +
                     (message.empty() ? "" : ": " + message);
    } else if (!out->body.is_object()) {
        out->error = "HTTP " + std::to_string(out->status) +
                     " without a JSON object (is this "
                     "a sluice admin API?)";
    }
}

#pragma GCC diagnostic pop

/// Runs `c` against every replica at once; outcomes in replica order.
std::vector<outcome> call_all(const std::vector<replica>& replicas, const call& c,
                              const std::string& token, std::chrono::milliseconds timeout) {
    std::vector<outcome> outs(replicas.size());
    net::io_context ctx(1);
    for (std::size_t i = 0; i < replicas.size(); ++i) {
        if (!replicas[i].endpoint) {
            outs[i].error = replicas[i].resolve_error;
            continue;
        }
        net::co_spawn(ctx, exchange(&replicas[i], c, &token, timeout, &outs[i]),
                      [out = &outs[i]](std::exception_ptr e) {
                          if (!e)
                              return;
                          try {
                              std::rethrow_exception(e);
                          } catch (const std::exception& ex) {
                              out->answered = false;
                              out->error = std::string("client error: ") + ex.what();
                          }
                      });
    }
    ctx.run();
    return outs;
}

bool ok(const outcome& o) {
    return o.error.empty() && o.status >= 200 && o.status <= 299 && o.body.is_object();
}

std::string api_reason(const outcome& o) {
    if (const auto* obj = o.body.if_object())
        if (const auto* v = obj->if_contains("reason"); v && v->is_string())
            return std::string(v->as_string());
    return {};
}

void report_failure(std::string_view cmd, const replica& r, const outcome& o) {
    std::cerr << "sluice " << cmd << ": admin API " << r.label << ": " << o.error << "\n";
}

// ------------------------------------------------------------------ text output

// Data shown comes partly from agents (URLs, identities, destinations): a terminal must
// never receive its control bytes.
std::string printable(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (unsigned char c : s) {
        if (c < 0x20 || c == 0x7f) {
            static constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 0xf];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

std::size_t display_width(std::string_view s) {
    std::size_t n = 0;
    for (unsigned char c : s)
        n += (c & 0xC0) != 0x80; // count UTF-8 code points, not bytes
    return n;
}

std::string cut(const std::string& s, std::size_t width) {
    if (display_width(s) <= width)
        return s;
    if (width == 0)
        return {};
    std::string out;
    std::size_t n = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if ((c & 0xC0) != 0x80 && ++n > width - 1)
            break;
        out += s[i];
    }
    return out + "\u2026";
}

std::optional<std::size_t> terminal_width() {
    if (!::isatty(STDOUT_FILENO))
        return std::nullopt;
    struct winsize ws {};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

/// An aligned table; `flex` is the column cut first when a terminal is too narrow.
struct table {
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    std::vector<std::vector<std::string>> notes; ///< per row: indented lines printed under it
    std::size_t flex = 0;
    std::vector<bool> right; ///< right-aligned columns

    void add(std::vector<std::string> row, std::vector<std::string> row_notes = {}) {
        for (auto& cell : row)
            cell = printable(cell);
        for (auto& n : row_notes)
            n = printable(n);
        rows.push_back(std::move(row));
        notes.push_back(std::move(row_notes));
    }

    void print(std::ostream& os) const {
        std::vector<std::size_t> w(header.size());
        for (std::size_t c = 0; c < header.size(); ++c) {
            w[c] = display_width(header[c]);
            for (const auto& r : rows)
                w[c] = std::max(w[c], display_width(r[c]));
        }
        auto term = terminal_width();
        if (term) {
            std::size_t total = 0;
            for (auto x : w)
                total += x + 2;
            if (total > *term) {
                std::size_t excess = total - *term;
                std::size_t min_flex = std::max<std::size_t>(display_width(header[flex]), 12);
                w[flex] =
                    w[flex] > min_flex + excess ? w[flex] - excess : std::min(w[flex], min_flex);
            }
        }
        auto line = [&](const std::vector<std::string>& cells) {
            std::string out;
            for (std::size_t c = 0; c < cells.size(); ++c) {
                std::string cell = cut(cells[c], w[c]);
                std::string pad(w[c] - display_width(cell), ' ');
                bool last = c + 1 == cells.size();
                bool r = c < right.size() && right[c];
                out += r ? pad + cell : (last ? cell : cell + pad);
                if (!last)
                    out += "  ";
            }
            os << out << "\n";
        };
        line(header);
        for (std::size_t i = 0; i < rows.size(); ++i) {
            line(rows[i]);
            for (const auto& n : notes[i])
                os << "    " << (term ? cut(n, *term > 4 ? *term - 4 : 0) : n) << "\n";
        }
    }
};

std::string str(const json::object& o, std::string_view key) {
    if (const auto* v = o.if_contains(key)) {
        if (v->is_string())
            return std::string(v->as_string());
        if (v->is_int64())
            return std::to_string(v->as_int64());
        if (v->is_uint64())
            return std::to_string(v->as_uint64());
        if (v->is_bool())
            return v->as_bool() ? "true" : "false";
    }
    return {};
}

std::int64_t num(const json::object& o, std::string_view key) {
    if (const auto* v = o.if_contains(key)) {
        if (v->is_int64())
            return v->as_int64();
        if (v->is_uint64())
            return static_cast<std::int64_t>(std::min<std::uint64_t>(v->as_uint64(), INT64_MAX));
        if (v->is_double())
            return static_cast<std::int64_t>(v->as_double());
    }
    return -1;
}

std::string human_ms(std::int64_t ms) {
    if (ms < 0)
        return "-";
    if (ms < 1000)
        return std::to_string(ms) + "ms";
    std::int64_t s = ms / 1000;
    char buf[32];
    if (s < 60)
        std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
    else if (s < 3600)
        std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                      static_cast<long long>(s % 60));
    else if (s < 86400)
        std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                      static_cast<long long>(s / 60 % 60));
    else
        std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(s / 86400),
                      static_cast<long long>(s / 3600 % 24));
    return buf;
}

std::string human_bytes(std::int64_t b) {
    if (b < 0)
        return "-";
    if (b < 1024)
        return std::to_string(b) + " B";
    static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(b);
    int u = -1;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

void print_json(const json::value& v) {
    std::cout << json::serialize(v) << "\n";
}

// ------------------------------------------------------------------ shared setup

struct session {
    options opts;
    std::vector<replica> replicas;
    std::string token;
};

// Parses options, finds the token and the replicas. Returns the exit code on failure.
std::expected<session, int> open_session(std::string_view cmd, int argc, char** argv, int first,
                                         std::set<std::string_view> extra) {
    std::set<std::string_view> allowed{"--admin", "--token-file", "--data-dir",
                                       "--dir",   "--json",       "--timeout"};
    allowed.insert(extra.begin(), extra.end());
    for (int i = first; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--")
            break;
        if (a == "-h" || a == "--help") {
            std::cout << usage_text;
            return std::unexpected(0);
        }
    }
    auto o = parse_options(argc, argv, first, std::move(allowed));
    if (!o)
        return std::unexpected(usage_error(cmd, o.error()));
    session s;
    s.opts = std::move(*o);
    auto replicas = find_replicas(s.opts);
    if (!replicas) {
        std::cerr << "sluice " << cmd << ": " << replicas.error() << "\n";
        return std::unexpected(2);
    }
    s.replicas = std::move(*replicas);
    auto token = find_token(s.opts);
    if (!token) {
        std::cerr << "sluice " << cmd << ": " << token.error() << "\n";
        return std::unexpected(2);
    }
    s.token = std::move(*token);
    return s;
}

json::object replica_status(const replica& r, const outcome& o) {
    json::object e{{"replica", r.label}, {"ok", ok(o)}};
    if (o.answered)
        e["status"] = o.status;
    if (!ok(o)) {
        e["error"] = o.error;
        if (auto reason = api_reason(o); !reason.empty())
            e["reason"] = reason;
    }
    return e;
}

std::string default_by() {
    std::string user;
    if (const auto* pw = ::getpwuid(::getuid()); pw && pw->pw_name)
        user = pw->pw_name;
    else if (const char* u = std::getenv("USER"))
        user = u;
    else
        user = "uid" + std::to_string(::getuid());
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0 && host[0])
        return user + "@" + host;
    return user;
}

// ------------------------------------------------------------------ approvals

int approvals_list(session& s) {
    auto outs =
        call_all(s.replicas, call{http::verb::get, "/v1/approvals", {}}, s.token, s.opts.timeout);
    bool failed = false;
    json::array merged, statuses;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        statuses.push_back(replica_status(s.replicas[i], outs[i]));
        if (!ok(outs[i])) {
            failed = true;
            continue;
        }
        const auto* list = outs[i].body.as_object().if_contains("approvals");
        if (!list || !list->is_array()) {
            failed = true;
            outs[i].error = "answer without an \"approvals\" array";
            statuses.back().as_object()["ok"] = false;
            statuses.back().as_object()["error"] = outs[i].error;
            continue;
        }
        for (const auto& a : list->as_array()) {
            if (!a.is_object())
                continue;
            json::object e = a.as_object();
            e["replica"] = s.replicas[i].label;
            merged.push_back(std::move(e));
        }
    }
    // Nearest expiry first: that is the one a person must look at now.
    std::stable_sort(merged.begin(), merged.end(), [](const json::value& a, const json::value& b) {
        return num(a.as_object(), "expires_in_ms") < num(b.as_object(), "expires_in_ms");
    });
    if (s.opts.json) {
        print_json(json::object{{"approvals", merged}, {"replicas", statuses}});
    } else if (merged.empty()) {
        std::cout << "no pending approvals\n";
    } else {
        bool multi = s.replicas.size() > 1;
        table t;
        if (multi)
            t.header.push_back("REPLICA");
        for (const char* h :
             {"ID", "IDENTITY", "SOURCE", "AGE", "EXPIRES", "REASON", "FINDINGS", "REQUEST"})
            t.header.push_back(h);
        t.flex = t.header.size() - 1;
        t.right.assign(t.header.size(), false);
        t.right[t.header.size() - 5] = t.right[t.header.size() - 4] = true;
        t.right[t.header.size() - 2] = true;
        for (const auto& v : merged) {
            const auto& a = v.as_object();
            std::vector<std::string> row;
            if (multi)
                row.push_back(str(a, "replica"));
            std::vector<std::string> notes;
            std::size_t nfind = 0;
            if (const auto* f = a.if_contains("findings"); f && f->is_array()) {
                for (const auto& fv : f->as_array()) {
                    if (!fv.is_object())
                        continue;
                    const auto& fo = fv.as_object();
                    ++nfind;
                    std::string n = "finding " + str(fo, "rule") + " in " + str(fo, "location");
                    if (auto var = str(fo, "variant"); !var.empty())
                        n += " via " + var;
                    if (auto off = str(fo, "offset"); !off.empty())
                        n += " at " + off;
                    n += "  " + str(fo, "fingerprint");
                    notes.push_back(std::move(n));
                }
            }
            for (const auto& x :
                 {str(a, "id"), str(a, "identity"), str(a, "source"), human_ms(num(a, "age_ms")),
                  human_ms(num(a, "expires_in_ms")), str(a, "reason"), std::to_string(nfind),
                  str(a, "method") + " " + str(a, "url")})
                row.push_back(x);
            t.add(std::move(row), std::move(notes));
        }
        t.print(std::cout);
    }
    for (std::size_t i = 0; i < outs.size(); ++i)
        if (!ok(outs[i]))
            report_failure("approvals list", s.replicas[i], outs[i]);
    return failed ? 3 : 0;
}

int approvals_decide(session& s, std::string_view verb, const std::string& id) {
    std::string cmd = "approvals " + std::string(verb);
    // The id travels as one path segment: anything else would be a different route.
    if (id.empty() || id.size() > 200 || !std::all_of(id.begin(), id.end(), [](unsigned char c) {
            return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ':';
        }))
        return usage_error(cmd, "'" + printable(id) +
                                    "' is not an approval id (see `sluice approvals list`)");
    json::object body{{"by", s.opts.by ? *s.opts.by : default_by()}};
    if (s.opts.reason)
        body["reason"] = *s.opts.reason;
    auto outs = call_all(s.replicas,
                         call{http::verb::post, "/v1/approvals/" + id + "/" + std::string(verb),
                              json::serialize(body)},
                         s.token, s.opts.timeout);
    // The approval lives on one replica; the others answer 404 unknown_approval.
    std::optional<std::size_t> decided;
    bool runtime_failure = false;
    json::array statuses;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        statuses.push_back(replica_status(s.replicas[i], outs[i]));
        if (ok(outs[i]))
            decided = decided ? decided : i;
        else if (!(outs[i].status == 404 && api_reason(outs[i]) == "unknown_approval"))
            runtime_failure = true;
    }
    if (s.opts.json) {
        json::object o;
        if (decided) {
            o = outs[*decided].body.as_object();
            o["replica"] = s.replicas[*decided].label;
        }
        o["replicas"] = statuses;
        print_json(o);
    } else if (decided) {
        const auto& b = outs[*decided].body.as_object();
        std::cout << printable(str(b, "decision").empty() ? std::string(verb) : str(b, "decision"))
                  << " " << printable(id) << " by " << printable(str(b, "by"))
                  << (s.replicas.size() > 1 ? " on " + s.replicas[*decided].label : "") << "\n";
    }
    for (std::size_t i = 0; i < outs.size(); ++i)
        if (!ok(outs[i]) && !(outs[i].status == 404 && api_reason(outs[i]) == "unknown_approval"))
            report_failure(cmd, s.replicas[i], outs[i]);
    if (decided)
        return runtime_failure ? 3 : 0;
    if (runtime_failure) {
        std::cerr << "sluice " << cmd << ": " << printable(id)
                  << " was not decided: a replica could not be asked\n";
        return 3;
    }
    std::cerr << "sluice " << cmd << ": no pending approval " << printable(id)
              << " (already decided, timed out or withdrawn; see `sluice approvals list`)\n";
    return 2;
}

// ------------------------------------------------------------------ kill / revive

int switch_command(std::string_view cmd, int argc, char** argv) {
    auto s = open_session(cmd, argc, argv, 1, {"--all"});
    if (!s)
        return s.error();
    if (s->opts.all == !s->opts.positional.empty() || s->opts.positional.size() > 1)
        return usage_error(cmd, "give one IDENTITY or --all");
    json::object body;
    std::string what;
    if (s->opts.all) {
        body["all"] = true;
        what = "all";
    } else {
        body["identity"] = s->opts.positional.front();
        what = s->opts.positional.front();
        if (what.empty())
            return usage_error(cmd, "empty identity");
    }
    auto outs = call_all(s->replicas,
                         call{http::verb::post, "/v1/" + std::string(cmd), json::serialize(body)},
                         s->token, s->opts.timeout);
    std::size_t failures = 0;
    std::int64_t closed = 0;
    json::array statuses;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        auto e = replica_status(s->replicas[i], outs[i]);
        if (ok(outs[i])) {
            const auto& b = outs[i].body.as_object();
            if (auto c = num(b, "closed"); c >= 0) {
                e["closed"] = c;
                closed += c;
            }
            if (const auto* p = b.if_contains("persisted"); p && p->is_bool())
                e["persisted"] = p->as_bool();
        } else {
            ++failures;
        }
        statuses.push_back(std::move(e));
    }
    bool is_kill = cmd == "kill";
    if (s->opts.json) {
        json::object o{{is_kill ? "killed" : "revived", what}, {"replicas", statuses}};
        if (is_kill)
            o["closed"] = closed;
        print_json(o);
    } else {
        table t;
        t.header = {"REPLICA", "RESULT"};
        t.flex = 1;
        for (std::size_t i = 0; i < outs.size(); ++i) {
            std::string result;
            if (ok(outs[i])) {
                result = (is_kill ? "killed " : "revived ") + what;
                if (auto c = num(outs[i].body.as_object(), "closed"); is_kill && c >= 0)
                    result += ", " + std::to_string(c) + (c == 1 ? " flow" : " flows") + " closed";
                // The kill switch state is kept in the data dir so a restart keeps it; say
                // so when that write failed.
                if (const auto* p = outs[i].body.as_object().if_contains("persisted");
                    p && p->is_bool() && !p->as_bool())
                    result += " (NOT saved in the data dir: a restart would undo it)";
            } else {
                result = "FAILED: " + outs[i].error;
            }
            t.add({s->replicas[i].label, result});
        }
        t.print(std::cout);
    }
    if (failures) {
        std::cerr << "sluice " << cmd << ": " << failures << " of " << outs.size()
                  << " replica(s) failed";
        for (std::size_t i = 0; i < outs.size(); ++i)
            if (!ok(outs[i]))
                std::cerr << "; " << s->replicas[i].label << ": " << outs[i].error;
        std::cerr << "\n";
        return 3;
    }
    return 0;
}

} // namespace

int cmd_approvals(int argc, char** argv) {
    std::string_view sub = argc >= 2 ? std::string_view(argv[1]) : std::string_view();
    if (sub == "-h" || sub == "--help") {
        std::cout << usage_text;
        return 0;
    }
    if (sub == "list") {
        auto s = open_session("approvals list", argc, argv, 2, {});
        if (!s)
            return s.error();
        if (!s->opts.positional.empty())
            return usage_error("approvals list", "unexpected argument '" +
                                                     printable(s->opts.positional.front()) + "'");
        return approvals_list(*s);
    }
    if (sub == "approve" || sub == "deny") {
        std::string cmd = "approvals " + std::string(sub);
        auto s = open_session(cmd, argc, argv, 2, {"--reason", "--by"});
        if (!s)
            return s.error();
        if (s->opts.positional.size() != 1)
            return usage_error(cmd, "give exactly one approval ID");
        return approvals_decide(*s, sub, s->opts.positional.front());
    }
    return usage_error("approvals", sub.empty() ? "missing list, approve or deny"
                                                : "unknown subcommand '" + printable(sub) + "'");
}

int cmd_flows(int argc, char** argv) {
    auto s = open_session("flows", argc, argv, 1, {});
    if (!s)
        return s.error();
    if (!s->opts.positional.empty())
        return usage_error("flows",
                           "unexpected argument '" + printable(s->opts.positional.front()) + "'");
    auto outs =
        call_all(s->replicas, call{http::verb::get, "/v1/flows", {}}, s->token, s->opts.timeout);
    bool failed = false;
    json::array merged, statuses;
    std::size_t answered = 0; // replicas whose flows were read
    // Kill switch state per replica: {all, identities}.
    std::vector<std::pair<std::string, std::string>> killed_text;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        auto e = replica_status(s->replicas[i], outs[i]);
        if (!ok(outs[i])) {
            failed = true;
            statuses.push_back(std::move(e));
            continue;
        }
        const auto& b = outs[i].body.as_object();
        const auto* list = b.if_contains("flows");
        if (!list || !list->is_array()) {
            failed = true;
            outs[i].error = "answer without a \"flows\" array";
            e["ok"] = false;
            e["error"] = outs[i].error;
            statuses.push_back(std::move(e));
            continue;
        }
        for (const auto& f : list->as_array()) {
            if (!f.is_object())
                continue;
            json::object fo = f.as_object();
            fo["replica"] = s->replicas[i].label;
            merged.push_back(std::move(fo));
        }
        std::string k;
        if (const auto* kv = b.if_contains("killed"); kv && kv->is_object()) {
            e["killed"] = *kv;
            const auto& ko = kv->as_object();
            if (const auto* all = ko.if_contains("all"); all && all->is_bool() && all->as_bool())
                k = "all identities";
            else if (const auto* ids = ko.if_contains("identities"); ids && ids->is_array())
                for (const auto& id : ids->as_array())
                    if (id.is_string())
                        k += (k.empty() ? "" : ", ") + std::string(id.as_string());
        }
        killed_text.emplace_back(s->replicas[i].label, k);
        statuses.push_back(std::move(e));
        ++answered;
    }
    std::stable_sort(merged.begin(), merged.end(), [](const json::value& a, const json::value& b) {
        const auto &x = a.as_object(), &y = b.as_object();
        auto ix = str(x, "identity"), iy = str(y, "identity");
        if (ix != iy)
            return ix < iy;
        return num(x, "age_ms") > num(y, "age_ms");
    });
    if (s->opts.json) {
        print_json(json::object{{"flows", merged}, {"replicas", statuses}});
    } else {
        bool multi = s->replicas.size() > 1;
        if (merged.empty()) {
            // Said only of replicas that answered: nothing is known of the others.
            if (answered == s->replicas.size())
                std::cout << "no live flows\n";
            else if (answered > 0)
                std::cout << "no live flows on the replicas that answered\n";
        } else {
            table t;
            if (multi)
                t.header.push_back("REPLICA");
            for (const char* h :
                 {"IDENTITY", "KIND", "FLOW", "SOURCE", "AGE", "UP", "DOWN", "DESTINATION"})
                t.header.push_back(h);
            t.flex = t.header.size() - 1;
            t.right.assign(t.header.size(), false);
            for (std::size_t c = t.header.size() - 4; c < t.header.size() - 1; ++c)
                t.right[c] = true;
            std::map<std::string, std::size_t> per_identity;
            for (const auto& v : merged) {
                const auto& f = v.as_object();
                std::vector<std::string> row;
                if (multi)
                    row.push_back(str(f, "replica"));
                for (const auto& x :
                     {str(f, "identity"), str(f, "kind"), str(f, "flow"), str(f, "source"),
                      human_ms(num(f, "age_ms")), human_bytes(num(f, "bytes_up")),
                      human_bytes(num(f, "bytes_down")), str(f, "destination")})
                    row.push_back(x);
                ++per_identity[str(f, "identity")];
                t.add(std::move(row));
            }
            t.print(std::cout);
            std::cout << merged.size() << (merged.size() == 1 ? " flow" : " flows") << ", "
                      << per_identity.size()
                      << (per_identity.size() == 1 ? " identity" : " identities") << "\n";
        }
        // The kill switch state: once when every replica agrees, else per replica.
        bool same = std::all_of(killed_text.begin(), killed_text.end(), [&](const auto& k) {
            return k.second == killed_text.front().second;
        });
        if (!killed_text.empty() && same) {
            const auto& k = killed_text.front().second;
            std::cout << "kill switch: " << (k.empty() ? "off" : "on for " + printable(k)) << "\n";
        } else {
            for (const auto& [label, k] : killed_text)
                std::cout << "kill switch on " << label << ": "
                          << (k.empty() ? "off" : "on for " + printable(k)) << "\n";
        }
    }
    for (std::size_t i = 0; i < outs.size(); ++i)
        if (!ok(outs[i]))
            report_failure("flows", s->replicas[i], outs[i]);
    return failed ? 3 : 0;
}

int cmd_kill(int argc, char** argv) {
    return switch_command("kill", argc, argv);
}

int cmd_revive(int argc, char** argv) {
    return switch_command("revive", argc, argv);
}

} // namespace sluice::cli
