#include "generation.hpp"

#include "sluice/dlp/credential_broker.hpp"
#include "sluice/dlp/variants.hpp"
#include "sluice/proxy/upstream_tls.hpp"

#include <boost/asio/ssl/context.hpp>

#include <exception>
#include <filesystem>
#include <vector>

namespace sluice::proxy {

namespace net = boost::asio;

std::expected<std::shared_ptr<const generation>, std::string>
make_generation(std::shared_ptr<const config::settings> settings) {
    auto gen = std::make_shared<generation>();
    try {
        gen->upstream_tls = std::make_shared<net::ssl::context>(
            make_upstream_context(settings->upstream_ca_file.value_or(std::filesystem::path{})));
    } catch (const std::exception& e) {
        std::string file = settings->upstream_ca_file ? settings->upstream_ca_file->string()
                                                      : std::string("system trust store");
        return std::unexpected("upstream trust store " + file + ": " + e.what());
    }
    // Brokered secrets are protected values too: if the agent ever holds and sends one
    // itself, in any encoding, DLP denies it.
    std::vector<dlp::brokered_credential> creds;
    std::vector<std::string> protect;
    for (const auto& pv : settings->protected_values)
        protect.push_back(pv.value);
    for (const auto& c : settings->credentials) {
        creds.push_back({.name = c.name,
                         .placeholder = c.placeholder,
                         .secret = c.source.value,
                         .hosts = c.hosts,
                         .ports = c.ports,
                         .path_prefix = c.path_prefix,
                         .header_name = c.header_name,
                         .header_value_template = c.header_value_template,
                         .query_name = c.query_name,
                         .identities = c.identities});
        protect.push_back(c.source.value);
    }
    gen->broker = std::make_shared<const dlp::credential_broker>(std::move(creds));
    if (!protect.empty()) {
        auto pv = dlp::protected_values::compile(protect);
        if (!pv)
            return std::unexpected(pv.error());
        gen->protect = std::move(*pv);
    }
    gen->settings = std::move(settings);
    return gen;
}

} // namespace sluice::proxy
