// `${VAR}` expansion in configuration scalars (config/README.md): internal to config/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

/// `raw` with every `${NAME}` replaced by the environment variable NAME of this process
/// (`$${` is a literal "${"). NAME is [A-Za-z_][A-Za-z0-9_]*. Returns nullopt when a name is
/// invalid, unset or unterminated, after appending one message per problem to `problems`;
/// messages name the variable, never its value. Reads the environment: not thread safe
/// against setenv.
std::optional<std::string> expand_env(std::string_view raw, std::vector<std::string>& problems);

} // namespace sluice::config
