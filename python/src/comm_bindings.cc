// Rendezvous pieces Python needs to start ranks itself (tests, notebooks): a TcpStoreServer the
// ranks' engines connect to through CADRE_STORE/CADRE_JOB_TOKEN, exactly as under `cadre run`.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "cadre/store/tcp_store.h"

namespace py = pybind11;

namespace cadre::python {

void BindComm(py::module_& m) {
  py::class_<store::TcpStoreServer>(m, "TcpStoreServer",
                                    "Rendezvous store server; stops when garbage collected.")
      .def(py::init([](const std::string& host, int port, const std::string& token) {
             store::TcpStoreServerOptions o;
             o.host = host;
             o.port = static_cast<uint16_t>(port);
             o.token = token;
             return std::make_unique<store::TcpStoreServer>(std::move(o));
           }),
           py::arg("host") = "127.0.0.1", py::arg("port") = 0, py::arg("token") = "",
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("port", &store::TcpStoreServer::port)
      .def_property_readonly("address", &store::TcpStoreServer::address);
}

}  // namespace cadre::python
