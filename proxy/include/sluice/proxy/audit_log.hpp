// The audit sink: one JSON object per line per decision (CONTRACT.md "Audit record"),
// appended to a file the agent cannot write, chained with SHA-256 (`prev`, `hash`).
// Never holds secret bytes: findings carry fingerprints only.
//
// Format: each line is a JSON object whose last member is "hash"; `hash` is the hex
// SHA-256 of the line's bytes with the `,"hash":"..."` member removed (i.e. of the
// serialised record without its hash), and `prev` is the previous record's `hash` ("" for
// the first record ever). `seq` counts from 1 and continues across rotated files.
//
// Rotation: when a record would take the file past `max_size` bytes, the file is renamed to
// `<path>.<UTC yyyymmddThhmmssZ>.<last seq, 12 digits>` (names sort in chain order) and a
// new file is started; the chain continues in it. `sluice audit verify audit.jsonl.*
// audit.jsonl` checks the whole chain.
//
// Group commit: async_append() hands a record to the writer thread, which writes every
// record waiting in one write(2) and, with fsync_always, makes them durable with one
// fdatasync(2) before it reports each one done; records that arrive during a sync form
// the next batch. A flow waiting for its record thus does not hold its io thread, and the
// sync cost is shared by every flow waiting at that moment. Without fsync_always the sync
// thread's fdatasync does not hold the lock, so batches go on being written meanwhile,
// and a completion (`completes` set: nobody waits for it) does not wake the writer: it
// goes in the batch of the next record a flow waits for, or within 2 ms.
// append() and async_append() share one order and one chain.
//
// Decide, record, then forward: an exchange that goes upstream is recorded twice. Its
// decision record (`"event":"start"`: identity, url, method, decision, findings, bytes 0)
// is durable before the first byte of the request leaves; its completion (`"event":"end"`,
// `"completes": <seq of the start>`, every field of the start with the final reason,
// bytes and duration) follows once the exchange is over. A record without `event` (a
// denial, or any record written before this format) is a whole exchange on its own, so an
// old reader that skips `"event":"start"` sees one record per exchange, as before. A start
// without its end (the process was killed mid-exchange) is reported by verify, not as a
// break of the chain.
//
// Space is reserved, not sampled: the writer knows the bytes it can still write (free
// space on the file system and RLIMIT_FSIZE, refreshed after every batch) and the bytes
// reserved for the completions of open starts; a start record that would leave less than
// `headroom` after its own completion is refused (not written), and its exchange with it.
// With fsync_always the figure is read after every batch. In interval mode it is read at
// most 10 ms apart, and after every batch once less than headroom + 1 MiB is left; in
// between the bytes this log writes are taken off it, so only another process's writes
// can go unseen, for at most 10 ms. The removed-or-replaced check follows the same rule.
//
// Thread safety: every member function may be called from any thread (internal mutex).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

namespace sluice::proxy {

struct audit_finding {
    std::string rule;
    std::string location; ///< url, header:<name>, body
    std::string variant;  ///< raw, or a decode chain
    std::size_t offset = 0;
    std::string fingerprint; ///< sha256:<16 hex>
};

/// Who decided a supervised request, and when (RFC 3339, UTC, ms).
struct audit_approval {
    std::string id;
    std::string by;
    std::string at;
    std::string reason; ///< the decider's words (API `reason`), written when not empty
};

/// One decision. `ts` and `seq`, `prev` and `hash` are filled in by the log.
struct audit_record {
    std::string flow;
    std::string identity; ///< "" when unresolved (written as null)
    std::string source;   ///< client address:port
    std::string method;
    std::string url;      ///< absolute URL (https://host:port/path?query), query values redacted
    std::string decision; ///< allow, deny, supervise_approved, supervise_denied
    std::string reason;   ///< CONTRACT.md reason code; "" for a plain allow
    std::vector<audit_finding> findings;
    std::uint64_t bytes_up = 0;   ///< request body bytes sent upstream
    std::uint64_t bytes_down = 0; ///< response body bytes relayed to the client
    std::uint64_t duration_ms = 0;
    bool inspected = true; ///< false for an explicitly uninspected tunnel
    /// Brokered credentials injected, or found out of scope (names only; written as
    /// "credentials" when not empty).
    std::vector<std::string> credentials;
    /// Response bytes hidden because they reflected an injected secret ("masked_bytes",
    /// written when not 0).
    std::uint64_t masked_bytes = 0;
    /// Set where supervised (written as "approval": {id, by, at}).
    std::optional<audit_approval> approval;
    /// A WebSocket session's record: client and origin messages relayed
    /// ("ws_messages_up", "ws_messages_down", written only when `websocket`).
    bool websocket = false;
    std::uint64_t ws_messages_up = 0;
    std::uint64_t ws_messages_down = 0;
    /// "" (a whole exchange in one record), "start" (the decision, written before anything
    /// is forwarded) or "end" (its completion); written as "event" when not empty.
    std::string event;
    /// For "end": the seq of the start record it completes (written as "completes").
    std::uint64_t completes = 0;
};

struct audit_options {
    /// fsync (fdatasync) every record before its writer is told it is written, except a
    /// batch of completions only (`completes` set), synced by the next batch or within
    /// `fsync_interval`. When false, a background thread syncs at most `fsync_interval`
    /// after a write (bounded loss window).
    bool fsync_always = true;
    std::chrono::milliseconds fsync_interval{1000};
    /// Rotate before a record would take the file past this many bytes; 0 = never.
    std::uint64_t max_size = 64ull << 20;
    /// The margin kept free for denials and completions: a start record is refused, and
    /// healthy() is false, unless this many bytes can still be written (free space on the
    /// file system and the process's RLIMIT_FSIZE) beyond the start, its completion and
    /// the completions reserved by every open start. 0 = no check.
    std::uint64_t headroom = 64 << 10;
    /// Written as "replica" in every record when not empty: the fleet replica that wrote
    /// it (control_store; fleet_store.hpp names it), so records shipped from many pods to
    /// one store say which chain they belong to. Covered by the record's hash.
    std::string replica;
};

class audit_log {
public:
    /// Opens (creating with mode 0600, parents 0700) `path` for appending and continues
    /// the hash chain from its last line. Error message names the file.
    static std::expected<std::unique_ptr<audit_log>, std::string>
    open(const std::filesystem::path& path, const audit_options& options);
    static std::expected<std::unique_ptr<audit_log>, std::string>
    open(const std::filesystem::path& path, bool fsync_always);

    ~audit_log();
    audit_log(const audit_log&) = delete;
    audit_log& operator=(const audit_log&) = delete;

    /// Appends one record (with ts, seq, prev, hash), rotating first when due, and with
    /// fsync_always fsyncs. Returns false if the write failed (the partial line is cut off
    /// again so a later record does not follow garbage); the caller must fail the flow
    /// closed. If the file was removed or replaced behind our back, a new file is created
    /// at `path` and the chain continues there (counted in errors()).
    bool append(const audit_record& r);

    /// Like append(), without waiting: `done(ok)` is called on the writer thread once the
    /// record and the batch it joined are written (and, with fsync_always, synced); ok has
    /// append()'s meaning. `done` must not block (post to the caller's executor).
    void async_append(audit_record r, std::move_only_function<void(bool)> done);

    /// async_append() that reports the record's seq: `done(seq)` with seq 0 when the record
    /// was not written (write failure, or a start refused for want of space). A start
    /// record (`event == "start"`) reserves room for its completion until a record with
    /// `completes == seq` is written.
    void async_append_seq(audit_record r, std::move_only_function<void(std::uint64_t)> done);

    /// Stops the writer thread after it has written every record still queued and called
    /// each one's `done`: once close() returns, the writer thread runs no completion. Later
    /// async_append calls write on the calling thread, as append(), and call `done` there
    /// (one racing with close() may do so after close() has returned).
    /// The server calls it once its io_contexts have stopped, before they are destroyed
    /// (a `done` may post to one). Idempotent; the destructor calls it too.
    void close();

    /// False once a write has failed (new flows are denied with 503 until it recovers:
    /// the next successful append makes it true again), or while the bytes left (as of
    /// the last batch) minus those reserved for open completions are under `headroom`
    /// plus room for a start like the last one and its completion.
    /// While false it re-reads free space (at most every 100 ms) so that freed space is
    /// seen without a write; a stale figure can only refuse, never admit: the writer
    /// checks every start record against the figure of the batch before it.
    /// Never waits for the writer: it does not take the lock held across a batch's sync.
    bool healthy() const;

    /// Bytes that could be written after the last batch, and bytes reserved for the
    /// completions of open starts (tests and metrics; UINT64_MAX when unlimited).
    std::uint64_t bytes_left() const { return left_.load(std::memory_order_relaxed); }
    std::uint64_t bytes_reserved() const { return reserved_.load(std::memory_order_relaxed); }

    /// Failed writes and detected removals since open (sluice_audit_errors_total).
    std::uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }

    /// With `all`, replaces every query value with "[redacted]", names kept (`a=[redacted]`)
    /// and a word without '=' replaced whole; the fragment is dropped. Without `all`, the
    /// URL as given. The scheme/host/path are kept.
    static std::string redact_query(std::string_view url, bool all);

private:
    audit_log() = default;
    bool reopen_locked();
    bool rotate_locked();
    void sync_loop();
    void writer_loop();
    /// Serialises `r` as record `seq` after `prev` (with `replica` when not empty); `hash`
    /// receives its hash.
    static std::string line_for(const audit_record& r, std::uint64_t seq, const std::string& prev,
                                std::string_view replica, std::string& hash);
    /// Appends `records` in order (rotating as due), then syncs once with fsync_always.
    /// `seqs` receives each record's seq, 0 where it was not written. False when the
    /// batch could not be written (every seq 0).
    bool commit_locked(const std::vector<const audit_record*>& records,
                       std::vector<std::uint64_t>& seqs);
    /// Bytes that can still be written to the file (free space, RLIMIT_FSIZE).
    std::uint64_t measure_left_locked() const;
    /// Writes `data` at the end (a partial write is cut off again); syncs or marks dirty.
    bool write_locked(const std::string& data, bool sync);

    mutable std::mutex mutex_; ///< held by the writer across write and fdatasync
    int fd_ = -1;
    std::atomic<std::uint64_t> size_{0}; ///< current file size (regular files)
    std::atomic<bool> regular_{false};
    ::dev_t dev_ = 0;
    ::ino_t ino_ = 0;
    audit_options options_;
    // healthy() reads these without mutex_, so a flow never waits for a batch's sync.
    std::atomic<bool> healthy_{true};
    mutable std::atomic<bool> room_{true}; ///< false while starts are refused for space
    mutable std::atomic<std::uint64_t> left_{UINT64_MAX}; ///< after the last batch
    std::atomic<std::uint64_t> reserved_{0};              ///< for open completions
    std::atomic<std::uint64_t> last_start_need_{0};       ///< bytes the last start asked for
    std::unordered_map<std::uint64_t, std::uint64_t> open_starts_; ///< seq -> reserved bytes
    /// Interval mode: the file and the space left are looked at at most this far apart,
    /// and at every batch once fewer than headroom + low_water bytes are left.
    static constexpr std::chrono::milliseconds look_every{10};
    static constexpr std::uint64_t low_water = 1ull << 20;
    std::chrono::steady_clock::time_point looked_{};               ///< under mutex_
    mutable std::mutex room_mutex_;                                ///< one re-read at a time
    mutable std::chrono::steady_clock::time_point room_checked_{}; ///< under room_mutex_
    bool dirty_ = false;                                           ///< written but not yet synced
    bool stopping_ = false;
    std::uint64_t seq_ = 0;
    std::string prev_hash_;
    std::filesystem::path path_;
    mutable std::atomic<std::uint64_t> errors_{0};
    std::condition_variable sync_cv_;
    std::thread sync_thread_;

    struct queued {
        audit_record record;
        std::move_only_function<void(std::uint64_t)> done; ///< seq, 0 = not written
    };
    std::mutex queue_mutex_; ///< guards queue_ and writer_stop_ (never held with mutex_)
    std::condition_variable queue_cv_;
    std::vector<queued> queue_;
    /// Queued records a flow waits for (every record but interval-mode completions): they
    /// wake the writer; completions join the next such batch (writer_loop).
    std::size_t urgent_ = 0;
    bool writer_asleep_ = false; ///< waiting with nothing queued: a completion wakes it too
    bool writer_stop_ = false;
    std::thread writer_thread_;
    std::mutex close_mutex_; ///< one join of writer_thread_
};

/// The outcome of verifying a chain of audit files given in chain order.
struct audit_verify_result {
    bool ok = false;
    /// On failure: changed | removed | reordered | truncated | unreadable.
    std::string what;
    std::string file;            ///< file of the first bad record
    std::size_t line = 0;        ///< its 1-based line number
    std::uint64_t seq = 0;       ///< its seq (0 when it could not be read)
    std::string detail;          ///< one human sentence
    std::uint64_t records = 0;   ///< records checked before stopping
    std::uint64_t first_seq = 0; ///< seq of the first record
    std::uint64_t last_seq = 0;
    std::string last_hash;
    /// Start records (`"event":"start"`) with no completion anywhere in the files: their
    /// exchanges were cut (the process died before the end was written). Not a chain
    /// error; the first few seqs are listed, all are counted.
    std::uint64_t cut = 0;
    std::vector<std::uint64_t> cut_seqs; ///< up to 20, in chain order
    /// Completions whose start is not in the files (pruned with --partial), counted only.
    std::uint64_t orphan_ends = 0;
};

/// Verifies `files` (in chain order, e.g. rotated files then the live one) as one chain:
/// every record's hash over its own bytes, every `prev` equal to the previous record's
/// hash, and seq increasing by one. The first record must be the genesis (seq 1, prev "")
/// unless `partial` (older files were pruned). Reads files line by line (memory: one set of
/// seq numbers and of open starts). Start records without a completion are counted in
/// `cut`, not failures. Never throws except std::bad_alloc.
audit_verify_result verify_audit_chain(const std::vector<std::filesystem::path>& files,
                                       bool partial = false);

} // namespace sluice::proxy
