// The fleet's shared kill switch and limits in Redis (fleet_store.hpp, issue 22); the
// state and coroutines are in fleet_store_impl.hpp.
#include "fleet_store_impl.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

namespace sluice::proxy {

namespace net = boost::asio;
using namespace std::chrono_literals;
using fleet_detail::random_hex;

fleet_store::fleet_store(std::unique_ptr<impl> i)
    : impl_(std::move(i)) {}

std::string fleet_store::new_replica_name() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    return std::string(host) + "-" + random_hex().substr(0, 8);
}

fleet_store::~fleet_store() {
    stop();
}

std::expected<std::shared_ptr<fleet_store>, std::string>
fleet_store::create(const config::control_store_settings& s, std::shared_ptr<control> ctl,
                    rate_limits* limits, std::string replica) {
    auto ep = redis_endpoint::parse(s.url);
    if (!ep)
        return std::unexpected(ep.error());
    auto i = std::make_unique<impl>();
    i->ctl = std::move(ctl);
    i->limits = limits;
    i->replica_id = std::move(replica);
    i->ep = std::move(*ep);
    i->prefix = s.key_prefix;
    i->fail_closed = s.fail_closed;
    i->timeout = s.connect_timeout;
    if (i->ep.tls) {
        try {
            i->tls = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
            i->tls->set_options(net::ssl::context::no_compression);
            SSL_CTX_set_min_proto_version(i->tls->native_handle(), TLS1_2_VERSION);
            if (s.ca_file)
                i->tls->load_verify_file(s.ca_file->string());
            else
                i->tls->set_default_verify_paths();
        } catch (const std::exception& e) {
            return std::unexpected(
                "control_store.redis.tls: cannot load " +
                (s.ca_file ? "ca_file " + s.ca_file->string() : std::string("the system store")) +
                ": " + fleet_detail::describe(e));
        }
    }
    return std::shared_ptr<fleet_store>(new fleet_store(std::move(i)));
}

bool fleet_store::start(bool have_last_known) {
    auto* i = impl_.get();
    if (i->fail_closed || !have_last_known) // until the first read (mark_up)
        i->ctl->set_store_refusing(true);
    net::co_spawn(i->ctx, i->run(), net::detached);
    i->thread = std::thread([i] {
        auto work = net::make_work_guard(i->ctx);
        i->ctx.run();
    });
    std::unique_lock lock(i->first_mutex);
    return i->first_cv.wait_for(lock, i->timeout + 500ms, [i] { return i->first_done; });
}

void fleet_store::stop() {
    auto* i = impl_.get();
    if (!i->thread.joinable())
        return;
    net::post(i->ctx, [i] {
        i->stopping = true;
        i->ctx.stop();
    });
    i->thread.join();
}

bool fleet_store::up() const {
    return impl_->up.load(std::memory_order_acquire);
}

bool fleet_store::settling() const {
    return impl_->settling_now.load(std::memory_order_acquire);
}

bool fleet_store::fail_closed() const {
    return impl_->fail_closed;
}

std::uint64_t fleet_store::errors() const {
    return impl_->errors.load(std::memory_order_relaxed);
}

std::uint64_t fleet_store::replicas() const {
    return impl_->replicas.load(std::memory_order_relaxed);
}

const std::string& fleet_store::replica() const {
    return impl_->replica_id;
}

net::awaitable<fleet_store::change> fleet_store::kill(std::optional<std::string> identity) {
    co_return co_await net::co_spawn(impl_->ctx, impl_->change_on_store(true, std::move(identity)),
                                     net::use_awaitable);
}

net::awaitable<fleet_store::change> fleet_store::revive(std::optional<std::string> identity) {
    co_return co_await net::co_spawn(impl_->ctx, impl_->change_on_store(false, std::move(identity)),
                                     net::use_awaitable);
}

} // namespace sluice::proxy
