// Credential brokering on arbitrary request targets and header values: apply() must never
// crash, must only inject what is in scope, and the response masker must give the same
// bytes however the body is split.
#include "sluice/dlp/credential_broker.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

const sluice::dlp::credential_broker& broker() {
    static const sluice::dlp::credential_broker b = [] {
        std::vector<sluice::dlp::brokered_credential> cs(2);
        cs[0].name = "h";
        cs[0].placeholder = "sluice:h";
        cs[0].secret = "SECRET-header-0123456789";
        cs[0].hosts = {"api.example.com"};
        cs[0].ports = {443};
        cs[0].path_prefix = "/v1/";
        cs[0].header_name = "Authorization";
        cs[0].header_value_template = "Bearer {secret}";
        cs[1].name = "q";
        cs[1].placeholder = "sluice:q";
        cs[1].secret = "SECRET/query+with=odd&chars";
        cs[1].hosts = {"*.example.com"};
        cs[1].ports = {443};
        cs[1].query_name = "key";
        return sluice::dlp::credential_broker(std::move(cs));
    }();
    return b;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace sluice::dlp;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    // First line: the target; second: a header name; the rest: its value.
    const auto nl = text.find('\n');
    const std::string_view target = text.substr(0, nl);
    std::string_view rest = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const auto nl2 = rest.find('\n');
    broker_header h{rest.substr(0, nl2),
                    nl2 == std::string_view::npos ? std::string_view{} : rest.substr(nl2 + 1)};
    policy p;
    p.identity = "*";
    auto r = broker().apply("agent", p, "api.example.com", 443, target, {&h, 1});
    if (r.outcome != broker_result::kind::inject &&
        (!r.header_values.empty() || r.target || !r.reflections.empty())) {
        __builtin_trap(); // nothing is injected unless the whole head is in scope
    }
    if (r.outcome == broker_result::kind::inject && r.reflections.empty()) {
        __builtin_trap();
    }

    // Masking: whole vs split at every 7 bytes.
    std::vector<std::string_view> secrets{"SECRET-header-0123456789", "SECRET"};
    secret_masker whole(secrets);
    std::string a(whole.feed(text, true));
    secret_masker split(secrets);
    std::string b;
    for (std::size_t at = 0; at < text.size(); at += 7) {
        b += split.feed(text.substr(at, 7), at + 7 >= text.size());
    }
    if (text.empty()) {
        b += split.feed({}, true);
    }
    if (a != b || a.size() != text.size() || a.find("SECRET") != std::string::npos) {
        __builtin_trap();
    }
    return 0;
}
