#include "admin_options.hpp"

#include "sluice/config/settings.hpp"
#include "sluice/detectors/text.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace sluice::cli {

namespace {

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

} // namespace

std::optional<std::chrono::milliseconds> parse_timeout(std::string_view s) {
    std::string text(s);
    if (!text.empty() &&
        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
        text += "s"; // a bare number is seconds
    auto d = config::parse_duration(text);
    if (!d || d->count() == 0 || *d > std::chrono::hours(1))
        return std::nullopt;
    return d;
}

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
                auto item = text::trim(list.substr(0, comma));
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
            auto d = parse_timeout(*v);
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

} // namespace sluice::cli
