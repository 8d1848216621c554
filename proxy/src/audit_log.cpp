#include "sluice/proxy/audit_log.hpp"

#include <boost/json.hpp>
#include <openssl/evp.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::proxy {

namespace {

std::string sha256_hex(std::string_view data) {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr);
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(len * 2);
    for (unsigned i = 0; i < len; ++i) {
        out.push_back(hex[md[i] >> 4]);
        out.push_back(hex[md[i] & 0xf]);
    }
    return out;
}

// RFC 3339 UTC with milliseconds, e.g. 2026-11-30T02:38:43.123Z.
std::string rfc3339_now() {
    auto now = std::chrono::system_clock::now();
    auto secs = std::chrono::system_clock::to_time_t(now);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[40];
    std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms.count()));
    return buf;
}

// Reads the last non-empty line of `path` (the chain continues from it).
std::string last_line(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        return {};
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return {};
    in.seekg(0, std::ios::end);
    auto size = static_cast<long long>(in.tellg());
    long long start = size > 65536 ? size - 65536 : 0;
    in.seekg(start);
    std::string tail(static_cast<std::size_t>(size - start), '\0');
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    tail.resize(static_cast<std::size_t>(in.gcount()));
    while (!tail.empty() && tail.back() == '\n')
        tail.pop_back();
    auto nl = tail.rfind('\n');
    return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

} // namespace

std::expected<std::unique_ptr<audit_log>, std::string>
audit_log::open(const std::filesystem::path& path, bool fsync_always) {
    std::error_code ec;
    if (path.has_parent_path()) {
        std::filesystem::create_directories(path.parent_path(), ec);
        if (ec)
            return std::unexpected("audit log " + path.string() +
                                   ": cannot create directory: " + ec.message());
    }
    auto log = std::unique_ptr<audit_log>(new audit_log());
    log->path_ = path;
    log->fsync_always_ = fsync_always;
    if (auto line = last_line(path); !line.empty()) {
        boost::system::error_code jec;
        auto v = boost::json::parse(line, jec);
        if (jec || !v.is_object())
            return std::unexpected("audit log " + path.string() +
                                   ": last record is not valid JSON; refusing to continue the "
                                   "chain (move the file aside)");
        const auto& o = v.as_object();
        if (auto* h = o.if_contains("hash"); h && h->is_string())
            log->prev_hash_ = std::string(h->as_string());
        if (auto* s = o.if_contains("seq"); s && s->is_int64())
            log->seq_ = static_cast<std::uint64_t>(s->as_int64());
    }
    log->fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (log->fd_ < 0)
        return std::unexpected("audit log " + path.string() + ": " + std::strerror(errno));
    return log;
}

audit_log::~audit_log() {
    if (fd_ >= 0)
        ::close(fd_);
}

bool audit_log::healthy() const {
    std::lock_guard lock(mutex_);
    return healthy_;
}

bool audit_log::append(const audit_record& r) {
    boost::json::array findings;
    for (const auto& f : r.findings) {
        findings.push_back(boost::json::object{{"rule", f.rule},
                                               {"location", f.location},
                                               {"variant", f.variant},
                                               {"offset", f.offset},
                                               {"fingerprint", f.fingerprint}});
    }
    std::lock_guard lock(mutex_);
    boost::json::object o;
    o["ts"] = rfc3339_now();
    o["seq"] = seq_ + 1;
    o["flow"] = r.flow;
    if (r.identity.empty())
        o["identity"] = nullptr;
    else
        o["identity"] = r.identity;
    o["source"] = r.source;
    o["method"] = r.method;
    o["url"] = r.url;
    o["decision"] = r.decision;
    o["reason"] = r.reason;
    o["inspected"] = r.inspected;
    o["findings"] = std::move(findings);
    o["bytes_up"] = r.bytes_up;
    o["bytes_down"] = r.bytes_down;
    o["duration_ms"] = r.duration_ms;
    o["prev"] = prev_hash_;
    // The hash covers the serialised record without its own "hash" member (which is
    // always last), so a verifier re-serialises the object minus "hash" and compares.
    std::string body = boost::json::serialize(o);
    std::string hash = sha256_hex(body);
    body.pop_back(); // '}'
    body += ",\"hash\":\"" + hash + "\"}\n";

    const char* p = body.data();
    std::size_t left = body.size();
    while (left > 0) {
        ssize_t n = ::write(fd_, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            healthy_ = false;
            return false;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    if (fsync_always_ && ::fdatasync(fd_) != 0) {
        healthy_ = false;
        return false;
    }
    ++seq_;
    prev_hash_ = std::move(hash);
    healthy_ = true;
    return true;
}

std::string audit_log::redact_query(std::string_view url, bool all) {
    auto q = url.find('?');
    if (q == std::string_view::npos || !all)
        return std::string(url);
    std::string out(url.substr(0, q + 1));
    std::string_view query = url.substr(q + 1);
    auto frag = query.find('#');
    if (frag != std::string_view::npos)
        query = query.substr(0, frag);
    bool first = true;
    while (!query.empty()) {
        auto amp = query.find('&');
        std::string_view pair = query.substr(0, amp);
        if (!first)
            out.push_back('&');
        first = false;
        auto eq = pair.find('=');
        out.append(pair.substr(0, eq == std::string_view::npos ? pair.size() : eq));
        if (eq != std::string_view::npos)
            out.append("=[redacted]");
        if (amp == std::string_view::npos)
            break;
        query.remove_prefix(amp + 1);
    }
    return out;
}

} // namespace sluice::proxy
