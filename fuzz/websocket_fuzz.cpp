// The WebSocket frame path as sluice's client-facing session runs it: arbitrary bytes as
// client frames (any flags, opcodes, masking, fragmentation, RSV1 compression bits)
// into a server-role Beast websocket stream over an in-memory test stream, with
// permessage-deflate negotiated and the relay's message limit, then every message read
// goes through ws_message_inspector with the built-in rules (proxy/src/websocket_relay.hpp).
// Checks: no message over the limit is ever delivered, and every finding is located at
// the message it came from.
//
// Input: byte 0 picks the options (bit 0: client offers permessage-deflate, bit 1:
// client_no_context_takeover, bit 2: small message limit); the rest is the frame stream.
#include "websocket_relay.hpp"

#include "sluice/config/rules_loader.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/websocket.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

std::shared_ptr<const sluice::detectors::ruleset> builtin() {
    auto rules = sluice::config::builtin_ruleset();
    if (!rules)
        std::abort();
    return *rules;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace beast = boost::beast;
    namespace websocket = beast::websocket;
    if (size < 1)
        return 0;
    const unsigned sel = data[0];
    const std::string_view frames(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::size_t limit = (sel & 4) ? 512 : 1 << 20;

    boost::asio::io_context ioc;
    beast::test::stream client(ioc);
    beast::test::stream server_end(ioc);
    client.connect(server_end);
    std::string handshake = "GET /chat HTTP/1.1\r\n"
                            "Host: localhost\r\n"
                            "Upgrade: websocket\r\n"
                            "Connection: Upgrade\r\n"
                            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                            "Sec-WebSocket-Version: 13\r\n";
    if (sel & 1) {
        handshake += "Sec-WebSocket-Extensions: permessage-deflate";
        if (sel & 2)
            handshake += "; client_no_context_takeover";
        handshake += "\r\n";
    }
    handshake += "\r\n";
    client.append(handshake);
    client.append(frames);
    client.close(); // the server reads to the end of the input, then EOF

    websocket::stream<beast::test::stream&> ws(server_end);
    websocket::permessage_deflate pmd;
    pmd.server_enable = true;
    ws.set_option(pmd);
    ws.read_message_max(limit);
    ws.auto_fragment(false);
    beast::error_code ec;
    ws.accept(ec);
    if (ec)
        return 0;

    sluice::dlp::policy policy;
    policy.dlp.max_body = limit;
    sluice::proxy::ws_message_inspector ins(
        policy, builtin(), {}, sluice::proxy::ws_message_inspector::tail_for(*builtin()));
    beast::flat_buffer buf;
    for (int i = 0; i < 1000; ++i) {
        buf.clear();
        ws.read(buf, ec);
        if (ec)
            break;
        if (buf.size() > limit)
            __builtin_trap();
        std::string_view msg(static_cast<const char*>(buf.data().data()), buf.size());
        auto v = ins.on_message(msg);
        const std::string where = "ws:message:" + std::to_string(ins.count());
        for (const auto& f : v.findings)
            if (f.location != where || f.offset > msg.size())
                __builtin_trap();
    }
    return 0;
}
