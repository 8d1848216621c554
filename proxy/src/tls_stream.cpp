// tls_core: the SSL object, the BIO that connects it to tls_stream's buffers, and the
// buffers themselves (tls_stream.hpp says why they are not asio::ssl::stream's).
#include "tls_stream.hpp"

#include <boost/asio/ssl/error.hpp>
#include <boost/system/system_error.hpp>

#include <openssl/bio.h>
#include <openssl/err.h>

#include <algorithm>
#include <cstring>

namespace sluice::proxy {

namespace {

// Reads while records are small take at most this much; a read that fills it makes the
// next one take a whole record.
constexpr std::size_t small_read = 4 * 1024;
// One TLS record: 2^14 bytes of plaintext plus at most 256 of expansion and the 5-byte
// header (RFC 8446 section 5.2; RFC 5246 section 6.2.3 allows 2048, never used by the
// AEAD suites OpenSSL offers here).
constexpr std::size_t record_read = 16 * 1024 + 256 + 5;
// A read that fills a whole record's worth means a bulk transfer (a download): take up
// to four records per read from then on, so one syscall and one event-loop turn carry
// 64 KiB instead of 16 (issue 23).
constexpr std::size_t bulk_read = 4 * record_read;
// Output buffers over this are given back after each flush.
constexpr std::size_t kept_output = 4 * 1024;

long bio_ctrl(BIO*, int cmd, long, void*) {
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; // tls_stream writes the output buffer after every SSL call
    default:
        return 0;
    }
}

int bio_create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
}

int bio_destroy(BIO* b) {
    BIO_set_data(b, nullptr);
    return 1;
}

const BIO_METHOD* bio_method() {
    static BIO_METHOD* method = [] {
        BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice tls");
        if (m == nullptr || !BIO_meth_set_write_ex(m, &tls_core::bio_write) ||
            !BIO_meth_set_read_ex(m, &tls_core::bio_read) || !BIO_meth_set_ctrl(m, &bio_ctrl) ||
            !BIO_meth_set_create(m, &bio_create) || !BIO_meth_set_destroy(m, &bio_destroy))
            return static_cast<BIO_METHOD*>(nullptr);
        return m;
    }();
    return method;
}

[[noreturn]] void throw_openssl(const char* what) {
    auto e = ERR_get_error();
    throw boost::system::system_error(
        boost::system::error_code(static_cast<int>(e), boost::asio::error::get_ssl_category()),
        what);
}

} // namespace

tls_core::tls_core(SSL_CTX* ctx) {
    const BIO_METHOD* m = bio_method();
    if (m == nullptr)
        throw_openssl("tls_stream: BIO method");
    ssl_ = SSL_new(ctx);
    if (ssl_ == nullptr)
        throw_openssl("tls_stream: SSL_new");
    BIO* bio = BIO_new(m);
    if (bio == nullptr) {
        SSL_free(ssl_);
        throw_openssl("tls_stream: BIO_new");
    }
    BIO_set_data(bio, this);
    SSL_set_bio(ssl_, bio, bio); // one reference, owned by the SSL object
    SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    // Whatever the context says: a renegotiation would make writes read.
    SSL_set_options(ssl_, SSL_OP_NO_RENEGOTIATION);
    in_want_ = small_read;
}

tls_core::~tls_core() {
    SSL_free(ssl_); // frees the BIO too
}

tls_core::step tls_core::classify(int ret, boost::system::error_code& ec) const {
    if (ret > 0)
        return step::done;
    switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
        return step::read;
    case SSL_ERROR_WANT_WRITE:
        return step::flush;
    case SSL_ERROR_ZERO_RETURN:
        ec = boost::asio::error::eof; // the peer's close_notify
        return step::failed;
    case SSL_ERROR_SYSCALL:
    case SSL_ERROR_SSL:
    default: {
        auto e = ERR_get_error();
        if (e == 0)
            ec = boost::asio::ssl::error::unspecified_system_error;
        else if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
            ec = boost::asio::ssl::error::stream_truncated;
        else
            ec = boost::system::error_code(static_cast<int>(e),
                                           boost::asio::error::get_ssl_category());
        return step::failed;
    }
    }
}

boost::asio::mutable_buffer tls_core::prepare_input() {
    const std::size_t held = in_end_ - in_begin_;
    if (held == 0) {
        in_begin_ = in_end_ = 0;
        if (in_cap_ != in_want_) {
            // Not zero-filled: only the bytes read are ever touched.
            in_.reset(new unsigned char[in_want_]);
            in_cap_ = in_want_;
        }
    } else if (in_cap_ - in_end_ < in_want_) {
        if (in_cap_ - held >= in_want_) {
            std::memmove(in_.get(), in_.get() + in_begin_, held);
        } else {
            const std::size_t cap = std::max(held + in_want_, 2 * in_want_);
            std::unique_ptr<unsigned char[]> bigger(new unsigned char[cap]);
            std::memcpy(bigger.get(), in_.get() + in_begin_, held);
            in_ = std::move(bigger);
            in_cap_ = cap;
        }
        in_begin_ = 0;
        in_end_ = held;
    }
    return {in_.get() + in_end_, std::min(in_want_, in_cap_ - in_end_)};
}

void tls_core::commit_input(std::size_t n) {
    // A read that filled its buffer means records are large: read whole records, then
    // several, from now on. A short read steps down again (the end of a download, or a
    // flow gone quiet), so an idle connection's next read holds a small buffer.
    if (n >= in_want_)
        in_want_ = in_want_ < record_read ? record_read : bulk_read;
    else if (n < small_read / 2)
        in_want_ = small_read;
    else if (in_want_ == bulk_read && n < record_read)
        in_want_ = record_read;
    in_end_ += n;
}

bool tls_core::record_buffered() const noexcept {
    // The TLS record header: type, version (2 bytes), length (2 bytes, big-endian);
    // RFC 8446 section 5.1.
    const std::size_t held = in_end_ - in_begin_;
    if (held < 5)
        return false;
    const unsigned char* h = in_.get() + in_begin_;
    return held >= 5 + (std::size_t{h[3]} << 8 | h[4]);
}

void tls_core::add_input(const void* data, std::size_t n) {
    if (n == 0)
        return;
    const std::size_t held = in_end_ - in_begin_;
    std::unique_ptr<unsigned char[]> bigger(new unsigned char[held + n + in_want_]);
    if (held != 0)
        std::memcpy(bigger.get(), in_.get() + in_begin_, held);
    std::memcpy(bigger.get() + held, data, n);
    in_ = std::move(bigger);
    in_cap_ = held + n + in_want_;
    in_begin_ = 0;
    in_end_ = held + n;
}

void tls_core::reserve_output(std::size_t plaintext) {
    // Per record: 5-byte header, content type, 16-byte AEAD tag (RFC 8446 section 5.2).
    out_.reserve(out_.size() + plaintext + (plaintext / (16 * 1024) + 1) * 64);
}

boost::asio::const_buffer tls_core::begin_flush() {
    out_.swap(flushing_buf_);
    return boost::asio::buffer(flushing_buf_);
}

void tls_core::end_flush() {
    flushing = false;
    flushing_buf_.clear();
    if (flushing_buf_.capacity() > kept_output)
        std::vector<unsigned char>().swap(flushing_buf_);
    if (out_.empty() && out_.capacity() > kept_output)
        std::vector<unsigned char>().swap(out_);
}

unsigned char* tls_core::scratch(std::size_t cap) {
    thread_local std::vector<unsigned char> buf;
    if (buf.size() < cap)
        buf.resize(cap);
    return buf.data();
}

int tls_core::bio_write(BIO* b, const char* data, std::size_t len, std::size_t* written) {
    auto* core = static_cast<tls_core*>(BIO_get_data(b));
    BIO_clear_retry_flags(b);
    auto* p = reinterpret_cast<const unsigned char*>(data);
    core->out_.insert(core->out_.end(), p, p + len);
    *written = len;
    return 1;
}

int tls_core::bio_read(BIO* b, char* data, std::size_t len, std::size_t* got) {
    auto* core = static_cast<tls_core*>(BIO_get_data(b));
    BIO_clear_retry_flags(b);
    const std::size_t held = core->in_end_ - core->in_begin_;
    if (held == 0) {
        BIO_set_retry_read(b);
        *got = 0;
        return 0;
    }
    const std::size_t n = std::min(len, held);
    std::memcpy(data, core->in_.get() + core->in_begin_, n);
    core->in_begin_ += n;
    if (core->in_begin_ == core->in_end_)
        core->in_begin_ = core->in_end_ = 0;
    *got = n;
    return 1;
}

} // namespace sluice::proxy
