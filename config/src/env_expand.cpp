#include "env_expand.hpp"

#include <algorithm>
#include <cstdlib>

namespace sluice::config {

namespace {

bool valid_env_name(std::string_view name) {
    return !name.empty() && !(name[0] >= '0' && name[0] <= '9') &&
           std::all_of(name.begin(), name.end(), [](char c) {
               return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '_';
           });
}

} // namespace

std::optional<std::string> expand_env(std::string_view raw, std::vector<std::string>& problems) {
    if (raw.find('$') == std::string_view::npos) {
        return std::string(raw);
    }
    std::string out;
    out.reserve(raw.size());
    bool ok = true;
    for (std::size_t i = 0; i < raw.size();) {
        if (raw.substr(i, 3) == "$${") {
            out += "${";
            i += 3;
            continue;
        }
        if (raw.substr(i, 2) != "${") {
            out += raw[i++];
            continue;
        }
        const auto close = raw.find('}', i + 2);
        if (close == std::string_view::npos) {
            problems.emplace_back("unterminated '${' in value");
            return std::nullopt;
        }
        const std::string name(raw.substr(i + 2, close - i - 2));
        if (!valid_env_name(name)) {
            problems.push_back("invalid environment variable name '${" + name + "}'");
            ok = false;
        } else if (const char* v = std::getenv(name.c_str()); v == nullptr) {
            problems.push_back("environment variable '" + name + "' is not set");
            ok = false;
        } else {
            out += v;
        }
        i = close + 1;
    }
    if (!ok) {
        return std::nullopt;
    }
    return out;
}

} // namespace sluice::config
