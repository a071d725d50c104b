// GET /ml/v4/models[?training_id=ID], GET /ml/v4/models/{id}, GET /ml/v4/models/{id}/download.
//
// A model as the API shows it: {metadata {id, name, created_at, modified_at}, entity {name,
// type, training {id}, software_spec, signature {inputs, outputs, labels}, size_bytes,
// content_location}}. The signature is model.json's (cadre.save_model): inputs and outputs with
// names, Open Inference Protocol datatypes and shapes (-1 for the batch), optional labels.
#include "cadre/base/printable.h"
#include "cadre/service/api.h"
#include "cadre/service/model_store.h"
#include "cadre/service/routes.h"
#include "cadre/service/zip_folder.h"

namespace cadre::service {
namespace {

using nlohmann::json;

json ModelResource(const ModelRecord& m) {
  json saved = json::parse(m.signature, nullptr, false);
  if (!saved.is_object()) saved = json::object();
  json signature = {{"inputs", saved.value("inputs", json::array())},
                    {"outputs", saved.value("outputs", json::array())},
                    {"labels", saved.value("labels", json::array())}};
  std::string torch_version = saved.value("torch_version", "");
  return {{"metadata",
           {{"id", m.id},
            {"name", m.name},
            {"created_at", m.created_at},
            {"modified_at", m.created_at}}},
          {"entity",
           {{"name", m.name},
            {"type", "torchscript"},
            {"training", {{"id", m.training_id}}},
            {"software_spec", {{"name", "pytorch"}, {"version", torch_version}}},
            {"signature", std::move(signature)},
            {"size_bytes", m.size_bytes},
            {"content_location", {{"url", "/ml/v4/models/" + m.id + "/download"}}}}}};
}

std::optional<ModelRecord> CallersModel(ApiContext& ctx, const httplib::Request& req,
                                        httplib::Response& res) {
  if (!CheckVersion(req, res)) return std::nullopt;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return std::nullopt;
  std::string id = req.matches[1];
  std::optional<ModelRecord> model = ctx.models.Get(id, user->id);
  if (!model)
    SendError(res, 404, "model_not_found", "model " + Quoted(id) + " does not exist", "id");
  return model;
}

void List(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!CheckVersion(req, res)) return;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return;
  json resources = json::array();
  for (const auto& m : ctx.models.List(user->id, req.get_param_value("training_id"))) {
    resources.push_back(ModelResource(m));
  }
  SendJson(res, 200, {{"total_count", resources.size()}, {"resources", resources}});
}

void Get(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  std::optional<ModelRecord> model = CallersModel(ctx, req, res);
  if (model) SendJson(res, 200, ModelResource(*model));
}

void Download(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  std::optional<ModelRecord> model = CallersModel(ctx, req, res);
  if (!model) return;
  std::string zip;
  Status st = ZipFolder(model->dir, ctx.options.max_body, &zip);
  if (!st.ok()) {
    SendError(res, 500, "internal_error", "cannot read the stored model: " + st.message());
    return;
  }
  res.status = 200;
  res.set_header("Content-Disposition", "attachment; filename=\"" + model->id + ".zip\"");
  res.set_content(std::move(zip), "application/zip");
}

}  // namespace

void AddModelRoutes(httplib::Server& server, ApiContext& ctx) {
  server.Get("/ml/v4/models",
             [&ctx](const httplib::Request& req, httplib::Response& res) { List(ctx, req, res); });
  server.Get(R"(/ml/v4/models/([^/]+))",
             [&ctx](const httplib::Request& req, httplib::Response& res) { Get(ctx, req, res); });
  server.Get(
      R"(/ml/v4/models/([^/]+)/download)",
      [&ctx](const httplib::Request& req, httplib::Response& res) { Download(ctx, req, res); });
}

}  // namespace cadre::service
