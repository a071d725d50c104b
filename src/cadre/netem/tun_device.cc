#include "cadre/netem/tun_device.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cadre::netem {
namespace {

constexpr const char* kTunPath = "/dev/net/tun";

Status OpenControl(int* fd) {
  *fd = open(kTunPath, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (*fd >= 0) return Status::Ok();
  const int err = errno;
  Code code = (err == ENOENT || err == ENODEV || err == EACCES || err == EPERM) ? Code::kUnavailable
                                                                                : Code::kIo;
  return Status(code,
                std::string("cannot open ") + kTunPath + " (TUN devices): " + std::strerror(err));
}

}  // namespace

Status OpenTunDevice(const std::string& name, int* fd) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return InvalidArgument("TUN device name '" + name + "' must be 1.." +
                           std::to_string(IFNAMSIZ - 1) + " characters");
  }
  int tun = -1;
  CADRE_RETURN_IF_ERROR(OpenControl(&tun));
  ifreq request{};
  request.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_VNET_HDR;
  std::memcpy(request.ifr_name, name.data(), name.size());
  if (ioctl(tun, TUNSETIFF, &request) != 0) {
    const int err = errno;
    close(tun);
    Code code = err == EPERM ? Code::kUnavailable : Code::kIo;
    return Status(code, "cannot create TUN device " + name + ": " + std::strerror(err));
  }
  // struct virtio_net_hdr: flags, gso_type (one byte each), hdr_len, gso_size, csum_start,
  // csum_offset (two bytes each). linux/virtio_net.h does not compile as C++.
  int prefix = static_cast<int>(kTunPacketPrefix);
  const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
  if (ioctl(tun, TUNSETVNETHDRSZ, &prefix) != 0 || ioctl(tun, TUNSETOFFLOAD, offloads) != 0) {
    const int err = errno;
    close(tun);
    return IoError("cannot enable offloads on TUN device " + name + ": " + std::strerror(err));
  }
  *fd = tun;
  return Status::Ok();
}

Status CheckTunSupport() {
  int fd = -1;
  CADRE_RETURN_IF_ERROR(OpenControl(&fd));
  close(fd);
  return Status::Ok();
}

}  // namespace cadre::netem
