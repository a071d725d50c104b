#include "cadre/store/tcp_store.h"

#include "cadre/base/status.h"
#include "cadre/net/frame.h"
#include "cadre/net/handshake.h"
#include "cadre/net/wire.h"
#include "cadre/store/tcp_store_protocol.h"

namespace cadre::store {

struct TcpStore::Reply {
  uint8_t type = 0;
  std::vector<uint8_t> payload;
};

namespace {

void PutKeys(net::WireWriter& w, const std::vector<std::string>& keys) {
  w.PutU32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.PutString(k);
}

void CheckKey(const std::string& key) {
  if (key.size() > kMaxKeyBytes) {
    throw Error(InvalidArgument("store key of " + std::to_string(key.size()) +
                                " bytes exceeds the limit of " + std::to_string(kMaxKeyBytes)));
  }
}

uint64_t Millis(Duration d) { return static_cast<uint64_t>(std::max<int64_t>(d.count(), 0)); }

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  ThrowIfError(net::ValidateJobToken(options_.token).WithContext("TcpStore client"));
  timeout_ = options_.timeout;
  std::lock_guard<std::mutex> lock(mu_);
  EnsureConnectedLocked();
}

TcpStore::~TcpStore() = default;

void TcpStore::EnsureConnectedLocked() {
  if (socket_.valid()) return;
  std::string where = net::HostPort{options_.host, options_.port}.ToString();
  Deadline deadline(options_.connect_timeout);
  net::Socket s;
  // The first connection waits for a server that is not up yet; a reconnection finds a server
  // that was up, so a refusal means it is gone (its process ended) and fails at once: a rank
  // reporting a failure through a store that died must not wait out connect_timeout per call.
  Status st = net::Socket::Connect(options_.host, options_.port, deadline, &s, options_.hosts_file,
                                   /*retry_refused=*/!connected_once_);
  std::string peer;
  if (st.ok()) st = net::ClientHandshake(s, options_.token, options_.identity, deadline, &peer);
  if (!st.ok()) throw Error(st.WithContext("cannot reach the store at " + where));
  socket_ = std::move(s);
  connected_once_ = true;
}

TcpStore::Reply TcpStore::Call(uint8_t type, const std::vector<uint8_t>& payload,
                               Duration server_wait) {
  EnsureConnectedLocked();
  std::string where = "store at " + net::HostPort{options_.host, options_.port}.ToString();
  // The server answers parked requests itself when server_wait passes; the extra store timeout
  // covers a server that is alive but slow, and bounds the wait on one that stalls. Both are
  // capped (at about 35 years) so the deadline cannot overflow.
  constexpr Duration kCap(int64_t{1} << 40);
  Deadline deadline(std::min(server_wait, kCap) + std::min(timeout(), kCap));
  uint64_t tag = next_tag_++;
  Reply reply;
  net::FrameHeader h;
  Status s = net::SendFrame(socket_, type, 0, tag, payload, deadline);
  if (s.ok()) s = net::RecvFrame(socket_, wire::kMaxPayload, deadline, &h, &reply.payload);
  // An ERROR of tag 0 is about the connection (the server could not read a frame) and one of
  // kProtocol about a malformed request: the server closes the connection after either.
  if (s.ok() && h.tag != tag && !(h.tag == 0 && h.type == wire::kError)) {
    s = ProtocolError("reply for request " + std::to_string(h.tag) + " while waiting for " +
                      std::to_string(tag));
  }
  if (s.ok() && h.type == wire::kError) {
    net::WireReader r(reply.payload);
    uint8_t code = 0;
    std::string message;
    s = r.GetU8("code", &code);
    if (s.ok()) s = r.GetString("message", 1 << 20, &message);
    if (s.ok()) {
      if (code == 0 || code > static_cast<uint8_t>(Code::kInternal)) {
        s = ProtocolError("error reply with unknown code " + std::to_string(code));
      } else if (h.tag == 0 || static_cast<Code>(code) == Code::kProtocol) {
        s = Status(static_cast<Code>(code),
                   "the store refused this client's request and closed "
                   "the connection: " +
                       message);
      } else {
        throw Error(static_cast<Code>(code), message);  // the stream is still in step
      }
    }
  }
  if (!s.ok()) {
    // The stream position is unknown (or the server is gone): reconnect on the next call.
    socket_.Close();
    throw Error(s.WithContext(where));
  }
  reply.type = h.type;
  return reply;
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  CheckKey(key);
  if (value.size() > kMaxValueBytes) {
    throw Error(InvalidArgument("value of " + std::to_string(value.size()) + " bytes for key '" +
                                key + "' exceeds the limit of " + std::to_string(kMaxValueBytes)));
  }
  net::WireWriter w;
  w.PutString(key);
  w.PutBytes(value);
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(wire::kSet, w.data(), Duration(0));
  if (r.type != wire::kOk) throw Error(ProtocolError("unexpected reply to SET"));
}

Bytes TcpStore::get(const std::string& key) {
  CheckKey(key);
  net::WireWriter w;
  w.PutU64(Millis(timeout()));
  w.PutString(key);
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(wire::kGet, w.data(), timeout());
  if (r.type != wire::kValue) throw Error(ProtocolError("unexpected reply to GET"));
  return std::move(r.payload);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  CheckKey(key);
  net::WireWriter w;
  w.PutString(key);
  w.PutI64(delta);
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(wire::kAdd, w.data(), Duration(0));
  net::WireReader reader(r.payload);
  int64_t value = 0;
  Status s = r.type == wire::kValue ? reader.GetI64("counter", &value)
                                    : ProtocolError("unexpected reply to ADD");
  if (s.ok()) s = reader.ExpectEnd("ADD reply");
  ThrowIfError(s);
  return value;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) CheckKey(k);
  net::WireWriter w;
  PutKeys(w, keys);
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(wire::kCheck, w.data(), Duration(0));
  if (r.type != wire::kValue || r.payload.size() != 1) {
    throw Error(ProtocolError("unexpected reply to CHECK"));
  }
  return r.payload[0] == 1;
}

void TcpStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  for (const auto& k : keys) CheckKey(k);
  net::WireWriter w;
  w.PutU64(Millis(timeout));
  PutKeys(w, keys);
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(wire::kWait, w.data(), timeout);
  if (r.type != wire::kOk) throw Error(ProtocolError("unexpected reply to WAIT"));
}

}  // namespace cadre::store
