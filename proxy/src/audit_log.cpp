#include "sluice/proxy/audit_log.hpp"

#include <boost/json.hpp>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <unordered_set>

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

// The hash member is always last, exactly `,"hash":"<64 hex>"}`: verification hashes the
// bytes before it plus the closing brace, so no JSON re-serialisation is involved.
constexpr std::string_view hash_key = ",\"hash\":\"";
constexpr std::size_t hash_suffix_len = hash_key.size() + 64 + 2; // + `"}`

bool split_hashed_line(std::string_view line, std::string& body, std::string& hash) {
    if (line.size() < hash_suffix_len + 2 || !line.ends_with("\"}"))
        return false;
    std::size_t at = line.size() - hash_suffix_len;
    if (line.substr(at, hash_key.size()) != hash_key)
        return false;
    hash.assign(line.substr(at + hash_key.size(), 64));
    for (char c : hash)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    body.assign(line.substr(0, at));
    body.push_back('}');
    return true;
}

std::string rotated_name(const std::filesystem::path& path, std::uint64_t last_seq) {
    auto secs = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    char seq[32];
    std::snprintf(seq, sizeof seq, "%012llu", static_cast<unsigned long long>(last_seq));
    return path.string() + "." + stamp + "." + seq;
}

} // namespace

std::expected<std::unique_ptr<audit_log>, std::string>
audit_log::open(const std::filesystem::path& path, bool fsync_always) {
    audit_options o;
    o.fsync_always = fsync_always;
    return open(path, o);
}

std::expected<std::unique_ptr<audit_log>, std::string>
audit_log::open(const std::filesystem::path& path, const audit_options& options) {
    std::error_code ec;
    if (path.has_parent_path()) {
        std::filesystem::create_directories(path.parent_path(), ec);
        if (ec)
            return std::unexpected("audit log " + path.string() +
                                   ": cannot create directory: " + ec.message());
    }
    auto log = std::unique_ptr<audit_log>(new audit_log());
    log->path_ = path;
    log->options_ = options;
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
    if (!log->reopen_locked())
        return std::unexpected("audit log " + path.string() + ": " + std::strerror(errno));
    if (!options.fsync_always && options.fsync_interval.count() > 0)
        log->sync_thread_ = std::thread([p = log.get()] { p->sync_loop(); });
    log->writer_thread_ = std::thread([p = log.get()] { p->writer_loop(); });
    return log;
}

void audit_log::close() {
    {
        std::lock_guard lock(queue_mutex_);
        writer_stop_ = true;
    }
    queue_cv_.notify_all();
    std::lock_guard lock(close_mutex_);
    if (writer_thread_.joinable())
        writer_thread_.join(); // after the records still queued are written
}

audit_log::~audit_log() {
    close();
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    sync_cv_.notify_all();
    if (sync_thread_.joinable())
        sync_thread_.join();
    if (fd_ >= 0) {
        if (dirty_)
            ::fdatasync(fd_);
        ::close(fd_);
    }
}

// (Re)opens path_ for appending and records its identity and size. errno on failure.
bool audit_log::reopen_locked() {
    int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        errno = e;
        return false;
    }
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = fd;
    regular_ = S_ISREG(st.st_mode);
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    size_ = static_cast<std::uint64_t>(st.st_size);
    return true;
}

bool audit_log::rotate_locked() {
    if (::fdatasync(fd_) != 0)
        return false;
    std::string target = rotated_name(path_, seq_);
    if (::rename(path_.c_str(), target.c_str()) != 0)
        return false;
    dirty_ = false;
    if (!reopen_locked())
        return false;
    spdlog::info("audit log rotated to {}", target);
    return true;
}

void audit_log::sync_loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        sync_cv_.wait_for(lock, options_.fsync_interval);
        if (dirty_ && fd_ >= 0) {
            // A failed sync means records may be lost: same treatment as a failed write.
            if (::fdatasync(fd_) != 0) {
                healthy_ = false;
                errors_.fetch_add(1, std::memory_order_relaxed);
            }
            dirty_ = false;
        }
    }
}

bool audit_log::healthy() const {
    // Called before every exchange: it must not take mutex_, which the writer holds
    // across a whole batch's write and fdatasync.
    if (!healthy_.load())
        return false;
    if (options_.headroom == 0 || !regular_.load())
        return true;
    // The allow record is written after the response was relayed, so "nothing forwarded
    // unrecorded" needs a look ahead: refuse new exchanges while the next records might
    // not fit (disk nearly full, or a file size limit nearly reached).
    std::unique_lock lock(room_mutex_, std::try_to_lock);
    if (!lock.owns_lock())
        return room_.load(); // another flow is checking right now
    auto now = std::chrono::steady_clock::now();
    if (now - room_checked_ < std::chrono::milliseconds(100))
        return room_.load();
    room_checked_ = now;
    bool room = true;
    struct statvfs vfs {};
    if (::statvfs(path_.c_str(), &vfs) == 0 &&
        static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize < options_.headroom)
        room = false;
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        size_ + options_.headroom > rl.rlim_cur)
        room = false;
    if (room_ && !room) {
        errors_.fetch_add(1, std::memory_order_relaxed);
        spdlog::error("audit log {}: less than {} bytes can still be written; denying new "
                      "exchanges until there is room",
                      path_.string(), options_.headroom);
    }
    room_.store(room);
    return room;
}

std::string audit_log::line_for(const audit_record& r, std::uint64_t seq, const std::string& prev,
                                std::string& hash) {
    boost::json::array findings;
    for (const auto& f : r.findings) {
        findings.push_back(boost::json::object{{"rule", f.rule},
                                               {"location", f.location},
                                               {"variant", f.variant},
                                               {"offset", f.offset},
                                               {"fingerprint", f.fingerprint}});
    }
    boost::json::object o;
    o["ts"] = rfc3339_now();
    o["seq"] = seq;
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
    if (!r.credentials.empty()) {
        boost::json::array names;
        for (const auto& c : r.credentials)
            names.emplace_back(c);
        o["credentials"] = std::move(names);
    }
    if (r.masked_bytes > 0)
        o["masked_bytes"] = r.masked_bytes;
    if (r.websocket) {
        o["ws_messages_up"] = r.ws_messages_up;
        o["ws_messages_down"] = r.ws_messages_down;
    }
    o["bytes_up"] = r.bytes_up;
    o["bytes_down"] = r.bytes_down;
    o["duration_ms"] = r.duration_ms;
    if (r.approval) {
        boost::json::object a;
        a["id"] = r.approval->id;
        a["by"] = r.approval->by;
        a["at"] = r.approval->at;
        if (!r.approval->reason.empty())
            a["reason"] = r.approval->reason;
        o["approval"] = std::move(a);
    }
    o["prev"] = prev;
    // The hash covers the serialised record without its own "hash" member (which is
    // always last), so a verifier hashes the line up to that member plus '}'.
    std::string body = boost::json::serialize(o);
    hash = sha256_hex(body);
    body.pop_back(); // '}'
    body += ",\"hash\":\"" + hash + "\"}\n";
    return body;
}

bool audit_log::write_locked(const std::string& data) {
    const char* p = data.data();
    std::size_t left = data.size();
    while (left > 0) {
        ssize_t n = ::write(fd_, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            // Cut a partial line off again (disk full, RLIMIT_FSIZE): the next record must
            // start on a fresh line or the chain would contain garbage.
            if (regular_ && left != data.size())
                (void)::ftruncate(fd_, static_cast<off_t>(size_));
            return false;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    if (options_.fsync_always) {
        if (::fdatasync(fd_) != 0)
            return false;
    } else {
        dirty_ = true;
    }
    return true;
}

bool audit_log::commit_locked(const std::vector<const audit_record*>& records) {
    auto fail = [&] {
        healthy_ = false;
        errors_.fetch_add(1, std::memory_order_relaxed);
        return false;
    };
    // Removed or replaced behind our back (rm, logrotate without copytruncate): records
    // written to the orphaned inode would be invisible, so start a new file at the path.
    if (regular_) {
        struct stat st {};
        if (::stat(path_.c_str(), &st) != 0 || st.st_dev != dev_ || st.st_ino != ino_) {
            errors_.fetch_add(1, std::memory_order_relaxed);
            spdlog::error("audit log {} was removed or replaced; continuing the chain in a new "
                          "file at seq {}",
                          path_.string(), seq_ + 1);
            if (!reopen_locked())
                return fail();
        }
    }
    std::string batch;
    std::uint64_t seq = seq_;
    std::string prev = prev_hash_;
    auto flush = [&] {
        if (batch.empty())
            return true;
        if (!write_locked(batch))
            return false;
        size_ += batch.size();
        seq_ = seq;
        prev_hash_ = prev;
        batch.clear();
        return true;
    };
    for (const audit_record* r : records) {
        std::string hash;
        std::string line = line_for(*r, seq + 1, prev, hash);
        const std::uint64_t at = size_ + batch.size();
        if (regular_ && options_.max_size > 0 && at > 0 && at + line.size() > options_.max_size) {
            // Rotation names the file after the last seq in it: write what precedes first.
            if (!flush() || !rotate_locked())
                return fail();
        }
        batch += line;
        ++seq;
        prev = std::move(hash);
    }
    if (!flush())
        return fail();
    healthy_ = true;
    return true;
}

bool audit_log::append(const audit_record& r) {
    std::lock_guard lock(mutex_);
    return commit_locked({&r});
}

void audit_log::async_append(audit_record r, std::move_only_function<void(bool)> done) {
    bool queued = false;
    {
        std::lock_guard lock(queue_mutex_);
        if (!writer_stop_) {
            queue_.push_back({std::move(r), std::move(done)});
            queued = true;
        }
    }
    if (queued)
        queue_cv_.notify_one();
    else
        done(append(r)); // closed: no writer thread to take it
}

void audit_log::writer_loop() {
    std::vector<queued> batch;
    std::vector<const audit_record*> records;
    for (;;) {
        {
            std::unique_lock lock(queue_mutex_);
            queue_cv_.wait(lock, [&] { return writer_stop_ || !queue_.empty(); });
            if (queue_.empty())
                return; // stopping, nothing left
            batch.swap(queue_);
        }
        records.clear();
        for (const auto& q : batch)
            records.push_back(&q.record);
        bool ok;
        {
            std::lock_guard lock(mutex_);
            ok = commit_locked(records);
        }
        for (auto& q : batch)
            q.done(ok);
        batch.clear();
    }
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

namespace {

struct parsed_line {
    bool hashed = false; // has a well-formed trailing hash member
    bool json = false;   // parses as an object with integer seq and string prev
    std::uint64_t seq = 0;
    std::string prev;
    std::string hash;
    std::string body;
};

parsed_line parse_line(std::string_view line) {
    parsed_line p;
    p.hashed = split_hashed_line(line, p.body, p.hash);
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object())
        return p;
    const auto& o = v.as_object();
    const auto* seq = o.if_contains("seq");
    const auto* prev = o.if_contains("prev");
    if (seq == nullptr || !seq->is_int64() || seq->as_int64() < 1 || prev == nullptr ||
        !prev->is_string())
        return p;
    p.seq = static_cast<std::uint64_t>(seq->as_int64());
    p.prev = std::string(prev->as_string());
    p.json = true;
    return p;
}

// Reads lines of a file; `complete` is false for a last line without its newline.
template <class F>
bool for_each_line(const std::filesystem::path& file, F&& f) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return false;
    std::string line;
    std::size_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        bool complete = !in.eof();
        if (!f(n, std::string_view(line), complete))
            return true;
    }
    return !in.bad();
}

} // namespace

audit_verify_result verify_audit_chain(const std::vector<std::filesystem::path>& files,
                                       bool partial) {
    audit_verify_result res;
    // Pass 1: every seq present anywhere, to tell a record that was moved (reordered) from
    // one that is gone (removed).
    std::unordered_set<std::uint64_t> present;
    for (const auto& f : files) {
        bool readable = for_each_line(f, [&](std::size_t, std::string_view line, bool) {
            auto p = parse_line(line);
            if (p.json)
                present.insert(p.seq);
            return true;
        });
        if (!readable) {
            res.what = "unreadable";
            res.file = f.string();
            res.detail = std::string("cannot read the file: ") + std::strerror(errno);
            return res;
        }
    }

    bool have_prev = false;
    std::uint64_t prev_seq = 0;
    std::string prev_hash;
    bool stop = false;
    auto bad = [&](const std::filesystem::path& f, std::size_t line, std::uint64_t seq,
                   std::string what, std::string detail) {
        res.what = std::move(what);
        res.file = f.string();
        res.line = line;
        res.seq = seq;
        res.detail = std::move(detail);
        stop = true;
        return false;
    };
    for (std::size_t fi = 0; fi < files.size() && !stop; ++fi) {
        const auto& f = files[fi];
        bool last_file = fi + 1 == files.size();
        for_each_line(f, [&](std::size_t n, std::string_view line, bool complete) {
            auto p = parse_line(line);
            if (!complete && (!p.json || !p.hashed))
                return bad(f, n, p.seq, "truncated",
                           "the record is cut off (no end of line)" +
                               std::string(last_file ? "" : " in the middle of the chain"));
            if (!p.json || !p.hashed)
                return bad(f, n, p.seq, "changed", "the line is not a well-formed audit record");
            if (sha256_hex(p.body) != p.hash)
                return bad(f, n, p.seq, "changed", "the record's content does not match its hash");
            if (!have_prev) {
                if (!partial && (p.seq != 1 || !p.prev.empty())) {
                    std::string what = present.contains(1) ? "reordered" : "removed";
                    return bad(f, n, p.seq, what,
                               "the chain does not start at seq 1 (records before seq " +
                                   std::to_string(p.seq) +
                                   " are missing; pass --partial if older files were pruned)");
                }
                res.first_seq = p.seq;
            } else if (p.seq != prev_seq + 1) {
                if (p.seq <= prev_seq || present.contains(prev_seq + 1))
                    return bad(f, n, p.seq, "reordered",
                               "expected seq " + std::to_string(prev_seq + 1) + " here");
                return bad(f, n, p.seq, "removed",
                           "records " + std::to_string(prev_seq + 1) + ".." +
                               std::to_string(p.seq - 1) + " are missing");
            } else if (p.prev != prev_hash) {
                // This record is intact (its hash matches) and in sequence, so the one
                // before it was rewritten with a recomputed hash.
                return bad(f, n, p.seq, "changed",
                           "prev does not match the hash of record " + std::to_string(prev_seq) +
                               " (that record was rewritten)");
            }
            have_prev = true;
            prev_seq = p.seq;
            prev_hash = p.hash;
            res.last_seq = p.seq;
            res.last_hash = p.hash;
            ++res.records;
            return true;
        });
    }
    res.ok = !stop;
    return res;
}

} // namespace sluice::proxy
