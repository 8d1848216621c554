// Failed client TLS handshakes with sluice (issue 24): a client that does not trust
// sluice's CA fails in a way only the operator can fix, so each failure gets a bounded
// reason code (for the metric sluice_client_tls_errors_total{reason}) and, once per
// source address, a log line naming the CA file the client should trust.
#pragma once

#include <boost/system/error_code.hpp>

#include <filesystem>
#include <string_view>

namespace sluice::proxy {

/// The reason code of a failed server-side handshake, from the error tls_stream or
/// asio's ssl::stream reported. The TLS alerts a client sends when it rejects sluice's
/// certificate (RFC 8446 section 6.2, OpenSSL's SSL_R_TLSV1_ALERT_* / SSL_R_SSLV3_ALERT_*
/// reason codes) map to "unknown_ca", "bad_certificate", "certificate_unknown"; others:
/// "handshake_failure", "protocol_version", "no_shared_cipher", "timeout", "closed" (the
/// client went away without an alert), "other". Never throws; thread-safe.
std::string_view client_tls_reason(const boost::system::error_code& ec) noexcept;

/// True for the reasons that mean the client does not trust the certificate it got.
bool client_distrusts_certificate(std::string_view reason) noexcept;

/// Logs (warn) at most once per source IP (`source` is "address:port"; at most 4,096
/// addresses remembered per process) that the client at `source` refused sluice's
/// certificate, naming `ca_file` and the variables that hand it to clients. Thread-safe.
void hint_client_tls(std::string_view flow, std::string_view source, std::string_view reason,
                     const std::filesystem::path& ca_file);

} // namespace sluice::proxy
