// The admin commands' options and token (src/cli_admin.hpp lists them): parsing argv and
// finding the bearer token. Internal to the sluice executable.
#pragma once

#include <chrono>
#include <expected>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

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

/// `--timeout`: a duration as in the configuration (config::parse_duration: 500ms, 10s, 5m,
/// 1h), or a bare number of seconds; above 0 and at most 1h. nullopt otherwise.
std::optional<std::chrono::milliseconds> parse_timeout(std::string_view s);

/// Parses argv[first..]: options anywhere, "--name value" or "--name=value"; `--` ends
/// options. `allowed` lists the value-less flags and value options this command takes.
/// The error is a one-line message for the usage text.
std::expected<options, std::string> parse_options(int argc, char** argv, int first,
                                                  std::set<std::string_view> allowed);

/// The bearer token: --token-file, else $SLUICE_ADMIN_TOKEN, else admin.token in the data
/// dir. Trailing whitespace is dropped; a token that cannot be a header value is refused.
/// Errors never contain the token.
std::expected<std::string, std::string> find_token(const options& o);

} // namespace sluice::cli
