#include "sluice/proxy/audit_log.hpp"

#include "audit_hash.hpp"

#include <boost/json.hpp>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
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

namespace sluice::proxy {

namespace {

// How long an interval-mode completion may wait for company before it is written.
constexpr auto completion_delay = std::chrono::milliseconds(2);

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
    log->left_.store(log->measure_left_locked());
    // With fsync_always the thread syncs batches of completions only (see commit_locked).
    if (options.fsync_interval.count() > 0)
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
        if (!dirty_ || fd_ < 0)
            continue;
        // Synced through a duplicate, without mutex_: in interval mode the writer goes on
        // writing batches (and flows waiting for their start records) meanwhile instead of
        // waiting for the disk behind this lock. A rotation meanwhile syncs the old file
        // itself before renaming it.
        const int fd = ::dup(fd_);
        dirty_ = false;
        lock.unlock();
        const bool ok = fd >= 0 && ::fdatasync(fd) == 0;
        if (fd >= 0)
            ::close(fd);
        lock.lock();
        if (!ok) { // records may be lost: same treatment as a failed write
            healthy_ = false;
            errors_.fetch_add(1, std::memory_order_relaxed);
        }
    }
}

std::uint64_t audit_log::measure_left_locked() const {
    if (options_.headroom == 0 || !regular_.load())
        return UINT64_MAX;
    std::uint64_t left = UINT64_MAX;
    struct statvfs vfs {};
    if (::statvfs(path_.c_str(), &vfs) == 0)
        left = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        const std::uint64_t size = size_.load();
        left = std::min<std::uint64_t>(left, rl.rlim_cur > size ? rl.rlim_cur - size : 0);
    }
    return left;
}

bool audit_log::healthy() const {
    // Called before every exchange: it must not take mutex_, which the writer holds
    // across a whole batch's write and fdatasync.
    if (!healthy_.load())
        return false;
    if (options_.headroom == 0 || !regular_.load())
        return true;
    // As the writer will judge the next start: room for one like the last, its
    // completion, every reserved completion and the headroom.
    auto fits = [&](std::uint64_t left) {
        return left >= reserved_.load() + options_.headroom + last_start_need_.load();
    };
    const bool fits_last = fits(left_.load());
    const bool admitting = room_.load();
    const bool ok = fits_last && admitting;
    // Look again every 100 ms, admitting or refusing: the writer's figure is refreshed
    // only by a write, so space taken by another process would not be seen while no
    // record is written (a long-lived WebSocket or tunnel relaying), and space freed
    // behind our back would not admit flows. At once when the writer's last figure turns
    // an admitting log into a refusing one: the refusal is then counted and said now.
    // A figure read here only ever lifts a refusal that the writer re-checks against its
    // own figure when the start record comes.
    std::unique_lock lock(room_mutex_, std::try_to_lock);
    if (!lock.owns_lock())
        return ok;
    auto now = std::chrono::steady_clock::now();
    if (!(admitting && !fits_last) && now - room_checked_ < std::chrono::milliseconds(100))
        return ok;
    room_checked_ = now;
    std::uint64_t left = measure_left_locked();
    left_.store(left);
    bool room = fits(left);
    if (!room && room_.exchange(false)) { // refusing from here on: counted and said once
        errors_.fetch_add(1, std::memory_order_relaxed);
        spdlog::error("audit log {}: less than {} bytes would be left after the next record; "
                      "denying new exchanges until there is room",
                      path_.string(), options_.headroom);
    }
    if (room && !room_.load()) {
        spdlog::warn("audit log {}: {} bytes can be written again; admitting new exchanges",
                     path_.string(), left);
        room_.store(true);
    }
    return room;
}

bool audit_log::write_locked(const std::string& data, bool sync) {
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
    if (sync) {
        if (::fdatasync(fd_) != 0)
            return false;
        dirty_ = false; // earlier unsynced bytes included
    } else {
        dirty_ = true;
    }
    return true;
}

bool audit_log::commit_locked(const std::vector<const audit_record*>& records,
                              std::vector<std::uint64_t>& seqs) {
    seqs.assign(records.size(), 0);
    auto fail = [&] {
        std::fill(seqs.begin(), seqs.end(), 0);
        healthy_ = false;
        errors_.fetch_add(1, std::memory_order_relaxed);
        left_.store(measure_left_locked());
        return false;
    };
    // With fsync_always every batch looks at the file and the space left: the batch waits
    // for the disk anyway. In interval mode a batch is often one or two records, and three
    // system calls a batch cost more than its write: they are made at most `look_every`
    // apart, and at every batch once little is left; in between, the bytes written are
    // taken off the last figure (only another process's writes go unseen, for at most
    // `look_every`).
    const auto now = std::chrono::steady_clock::now();
    const bool look = options_.fsync_always || now - looked_ >= look_every ||
                      left_.load() < options_.headroom + low_water;
    // Removed or replaced behind our back (rm, logrotate without copytruncate): records
    // written to the orphaned inode would be invisible, so start a new file at the path.
    if (regular_ && look) {
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
    // A batch of completions only is written without its own fdatasync under
    // fsync_always: nothing waits on its durability (the client has its answer, and the
    // start is on disk), and the next batch that syncs, a start's or a denial's, covers
    // it; the sync thread does within fsync_interval otherwise. Every start and every
    // single record is synced before its writer is told.
    const bool sync = options_.fsync_always &&
                      std::any_of(records.begin(), records.end(),
                                  [](const audit_record* r) { return r->completes == 0; });
    std::string batch;
    std::uint64_t seq = seq_;
    std::string prev = prev_hash_;
    // Reservations of the starts in `batch`, and completions it releases: applied once
    // the bytes are written.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> reserve;
    std::vector<std::uint64_t> release;
    std::uint64_t reserved = reserved_.load();
    std::uint64_t left = left_.load();
    std::uint64_t written = 0;
    auto flush = [&] {
        if (batch.empty())
            return true;
        if (!write_locked(batch, sync))
            return false;
        size_ += batch.size();
        written += batch.size();
        seq_ = seq;
        prev_hash_ = prev;
        for (auto [s, n] : reserve)
            open_starts_.emplace(s, n);
        for (auto s : release)
            open_starts_.erase(s);
        reserved_.store(reserved);
        reserve.clear();
        release.clear();
        batch.clear();
        return true;
    };
    bool refused = false;
    for (std::size_t i = 0; i < records.size(); ++i) {
        const audit_record& r = *records[i];
        std::string hash;
        std::string line = line_for(r, seq + 1, prev, options_.replica, hash);
        if (r.event == "start" && left != UINT64_MAX) {
            // Its completion repeats every field and adds counters: the start's size plus
            // a bound for what the end adds.
            const std::uint64_t end_size = line.size() + 512;
            last_start_need_.store(line.size() + end_size);
            const std::uint64_t need =
                batch.size() + line.size() + end_size + reserved + options_.headroom;
            if (need > left) {
                refused = true; // not written: its exchange is refused, nothing forwarded
                continue;
            }
            reserve.emplace_back(seq + 1, end_size);
            reserved += end_size;
        } else if (r.completes != 0) {
            auto it = open_starts_.find(r.completes);
            if (it != open_starts_.end()) {
                reserved -= std::min(reserved, it->second);
                release.push_back(r.completes);
            }
        }
        const std::uint64_t at = size_ + batch.size();
        if (regular_ && options_.max_size > 0 && at > 0 && at + line.size() > options_.max_size) {
            // Rotation names the file after the last seq in it: write what precedes first.
            if (!flush() || !rotate_locked())
                return fail();
        }
        batch += line;
        ++seq;
        seqs[i] = seq;
        prev = std::move(hash);
    }
    if (!flush())
        return fail();
    healthy_ = true;
    if (look) { // the next batch checks its starts against this figure
        left_.store(measure_left_locked());
        looked_ = now;
    } else if (left != UINT64_MAX) {
        left_.store(left > written ? left - written : 0);
    }
    if (refused && room_.exchange(false)) {
        errors_.fetch_add(1, std::memory_order_relaxed);
        spdlog::error("audit log {}: less than {} bytes would be left after the next record; "
                      "denying new exchanges until there is room",
                      path_.string(), options_.headroom);
    }
    return true;
}

bool audit_log::append(const audit_record& r) {
    std::vector<std::uint64_t> seqs;
    std::lock_guard lock(mutex_);
    return commit_locked({&r}, seqs) && seqs[0] != 0;
}

void audit_log::async_append(audit_record r, std::move_only_function<void(bool)> done) {
    async_append_seq(std::move(r),
                     [done = std::move(done)](std::uint64_t seq) mutable { done(seq != 0); });
}

void audit_log::async_append_seq(audit_record r,
                                 std::move_only_function<void(std::uint64_t)> done) {
    // In interval mode nobody waits for a completion (its exchange is answered, its start
    // on file): it wakes the writer only from a sleep with nothing queued (writer_loop).
    const bool lazy = !options_.fsync_always && r.completes != 0;
    bool queued = false;
    bool wake = false;
    {
        std::lock_guard lock(queue_mutex_);
        if (!writer_stop_) {
            queue_.push_back({std::move(r), std::move(done)});
            queued = true;
            urgent_ += lazy ? 0 : 1;
            wake = !lazy || writer_asleep_;
        }
    }
    if (queued) {
        if (wake)
            queue_cv_.notify_one();
        return;
    }
    // Closed: no writer thread to take it.
    std::vector<std::uint64_t> seqs;
    {
        std::lock_guard lock(mutex_);
        commit_locked({&r}, seqs);
    }
    done(seqs[0]);
}

void audit_log::writer_loop() {
    std::vector<queued> batch;
    std::vector<const audit_record*> records;
    std::vector<std::uint64_t> seqs;
    for (;;) {
        {
            std::unique_lock lock(queue_mutex_);
            // Interval mode: completions wait up to `completion_delay` for a record a flow
            // waits on, and go in its batch: one wake-up of this thread per exchange, not
            // two. With fsync always every record is urgent and nothing waits here.
            if (!options_.fsync_always)
                queue_cv_.wait_for(lock, completion_delay,
                                   [&] { return writer_stop_ || urgent_ > 0; });
            if (queue_.empty()) {
                writer_asleep_ = true;
                queue_cv_.wait(lock, [&] { return writer_stop_ || !queue_.empty(); });
                writer_asleep_ = false;
                if (queue_.empty())
                    return; // stopping, nothing left
                if (urgent_ == 0 && !writer_stop_)
                    continue; // a completion alone: it may have company within the delay
            }
            batch.swap(queue_);
            urgent_ = 0;
        }
        records.clear();
        for (const auto& q : batch)
            records.push_back(&q.record);
        {
            std::lock_guard lock(mutex_);
            commit_locked(records, seqs);
        }
        for (std::size_t i = 0; i < batch.size(); ++i)
            batch[i].done(seqs[i]);
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
        // A word without '=' is a value too (`?<token>`, or a token cut over `?A&B`, which
        // the joined view of the query reads as values): it goes like the others.
        auto eq = pair.find('=');
        if (eq != std::string_view::npos) {
            out.append(pair.substr(0, eq));
            out.append("=[redacted]");
        } else if (!pair.empty()) {
            out.append("[redacted]");
        }
        if (amp == std::string_view::npos)
            break;
        query.remove_prefix(amp + 1);
    }
    return out;
}

} // namespace sluice::proxy
