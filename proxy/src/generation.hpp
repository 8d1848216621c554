// Building one configuration generation (flow.hpp's `generation`) from loaded settings:
// the upstream trust store, the credential broker and the protected values. Used by the
// server at start-up and on every reload, and by unit tests that need a real generation.
// Internal to proxy/.
#pragma once

#include "flow.hpp"

#include "sluice/config/settings.hpp"

#include <expected>
#include <memory>
#include <string>

namespace sluice::proxy {

/// The generation for `settings`: the upstream TLS context (settings.upstream_ca_file, or
/// the system trust store), the broker of `credentials`, and the protected values
/// (`protected_values` plus every brokered secret, so an agent that sends one itself is
/// denied). Fails with a message naming the trust store file, or the protected-value
/// compile error; the message never holds a secret. Thread safe (no shared state).
std::expected<std::shared_ptr<const generation>, std::string>
make_generation(std::shared_ptr<const config::settings> settings);

} // namespace sluice::proxy
