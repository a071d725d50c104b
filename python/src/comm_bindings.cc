// Rendezvous pieces Python needs to start ranks itself (tests, notebooks): a TcpStoreServer the
// ranks' engines connect to through CADRE_STORE/CADRE_JOB_TOKEN, exactly as under `cadre run`.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "cadre/config/from_env.h"
#include "cadre/net/handshake.h"
#include "cadre/store/tcp_store.h"

namespace py = pybind11;

namespace cadre::python {

std::string RequiredToken(const std::optional<std::string>& token, const char* who) {
  if (!token) {
    throw Error(InvalidArgument(std::string(who) +
                                ": token is required: the job's secret (e.g. "
                                "secrets.token_hex(16)), which every peer must hold"));
  }
  ThrowIfError(net::ValidateJobToken(*token).WithContext(who));
  return *token;
}

void BindComm(py::module_& m) {
  py::class_<store::TcpStoreServer>(m, "TcpStoreServer",
                                    "Rendezvous store server; stops when garbage collected.")
      .def(py::init([](const std::string& host, int port, const std::optional<std::string>& token) {
             store::TcpStoreServerOptions o;
             o.host = host;
             o.port = static_cast<uint16_t>(port);
             o.token = RequiredToken(token, "TcpStoreServer");
             o.hosts_file = config::HostsFileFromEnv();  // a learner's name, as its engine
             return std::make_unique<store::TcpStoreServer>(std::move(o));
           }),
           py::arg("host") = "127.0.0.1", py::arg("port") = 0, py::arg("token") = py::none(),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("port", &store::TcpStoreServer::port)
      .def_property_readonly("address", &store::TcpStoreServer::address);
}

}  // namespace cadre::python
