#include "cadre/serving/torch_model.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <cstring>

#include "cadre/base/printable.h"

namespace cadre::serving {
namespace {

c10::ScalarType ToTorch(DataType t) {
  switch (t) {
    case DataType::kBool:
      return c10::kBool;
    case DataType::kUint8:
      return c10::kByte;
    case DataType::kInt8:
      return c10::kChar;
    case DataType::kInt16:
      return c10::kShort;
    case DataType::kInt32:
      return c10::kInt;
    case DataType::kInt64:
      return c10::kLong;
    case DataType::kFp16:
      return c10::kHalf;
    case DataType::kBf16:
      return c10::kBFloat16;
    case DataType::kFp32:
      return c10::kFloat;
    case DataType::kFp64:
      return c10::kDouble;
  }
  return c10::kFloat;
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// A c10::Error's message without its C++ backtrace: what a caller can act on.
std::string Message(const c10::Error& e) { return e.what_without_backtrace(); }

class TorchModel final : public Model {
 public:
  TorchModel(torch::jit::Module module, torch::Device device, ModelSignature signature)
      : module_(std::move(module)), device_(device), signature_(std::move(signature)) {}

  std::string device() const override { return device_.str(); }

  std::vector<HostTensor> Forward(const std::vector<HostTensor>& inputs) override {
    try {
      return Run(inputs);
    } catch (const c10::Error& e) {
      throw ModelError(Message(e));
    } catch (const ModelError&) {
      throw;
    } catch (const std::exception& e) {
      throw ModelError(e.what());
    }
  }

 private:
  std::vector<HostTensor> Run(const std::vector<HostTensor>& inputs) {
    c10::InferenceMode inference;
    std::vector<torch::jit::IValue> args;
    args.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const HostTensor& in = inputs[i];
      // from_blob does not copy; the tensor only lives during this call, while `in` does.
      torch::Tensor t = torch::from_blob(const_cast<std::byte*>(in.data.data()), in.shape,
                                         torch::TensorOptions().dtype(ToTorch(in.dtype)));
      args.emplace_back(device_.is_cpu() ? t : t.to(device_));
    }
    torch::jit::IValue result = module_.forward(std::move(args));
    std::vector<torch::Tensor> outs;
    if (result.isTensor()) {
      outs.push_back(result.toTensor());
    } else if (result.isTuple()) {
      for (const auto& v : result.toTupleRef().elements()) outs.push_back(v.toTensor());
    } else if (result.isTensorList()) {
      for (const torch::Tensor& t : result.toTensorVector()) outs.push_back(t);
    } else {
      throw ModelError("the model returned " + result.tagKind() +
                       ", not a tensor or a tuple of tensors");
    }
    if (outs.size() != signature_.outputs.size()) {
      throw ModelError("the model returned " + std::to_string(outs.size()) + " outputs; its " +
                       "signature lists " + std::to_string(signature_.outputs.size()));
    }
    int64_t rows = inputs.empty() ? 0 : inputs[0].rows();
    std::vector<HostTensor> host(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& spec = signature_.outputs[i];
      torch::Tensor t = outs[i].to(torch::kCPU, ToTorch(spec.dtype)).contiguous();
      if (t.dim() < 1 || t.size(0) != rows) {
        throw ModelError("output '" + spec.name + "' has shape " + ShapeString(t.sizes().vec()) +
                         " for " + std::to_string(rows) + " input rows");
      }
      host[i].dtype = spec.dtype;
      host[i].shape = t.sizes().vec();
      host[i].data.resize(static_cast<size_t>(t.nbytes()));
      std::memcpy(host[i].data.data(), t.data_ptr(), host[i].data.size());
    }
    return host;
  }

  torch::jit::Module module_;
  torch::Device device_;
  ModelSignature signature_;
};

}  // namespace

Status ResolveDevice(const std::string& requested, std::string* device) {
  if (requested == "cpu") {
    *device = "cpu";
    return Status::Ok();
  }
  bool cuda = torch::cuda::is_available();
  if (requested == "auto") {
    *device = cuda ? "cuda:0" : "cpu";
    return Status::Ok();
  }
  // The spelling first, so that a mistyped device is named as such with or without a GPU.
  const bool spelled =
      requested == "cuda" ||
      (requested.size() > 5 && requested.size() <= 9 && requested.rfind("cuda:", 0) == 0 &&
       std::all_of(requested.begin() + 5, requested.end(),
                   [](char c) { return c >= '0' && c <= '9'; }));
  if (!spelled) {
    return InvalidArgument("--device: expected auto, cpu, cuda or cuda:N, not " +
                           QuotedText(requested));
  }
  if (!cuda) {
    return Status(Code::kUnavailable, "--device " + requested + ": no CUDA device (this libtorch " +
                                          (torch::cuda::device_count() == 0 && !torch::hasCUDA()
                                               ? std::string("is built without CUDA")
                                               : std::string("sees no GPU")) +
                                          "); use --device cpu or auto");
  }
  try {
    torch::Device d(requested == "cuda" ? std::string("cuda:0") : requested);
    if (d.index() >= static_cast<int>(torch::cuda::device_count())) {
      return Status(Code::kUnavailable, "--device " + requested + ": there are " +
                                            std::to_string(torch::cuda::device_count()) +
                                            " CUDA devices");
    }
    *device = d.str();
  } catch (const c10::Error& e) {
    return InvalidArgument("--device " + requested + ": " + FirstLine(Message(e)));
  }
  return Status::Ok();
}

void ConfigureTorchThreads(int intra_op, int inter_op) {
  if (intra_op > 0) at::set_num_threads(intra_op);
  if (inter_op > 0) at::set_num_interop_threads(inter_op);
}

Status LoadTorchModel(const std::filesystem::path& dir, const ModelSignature& signature,
                      const std::string& device, std::unique_ptr<Model>* out) {
  std::filesystem::path file = dir / signature.model_file;
  torch::Device dev(torch::kCPU);
  torch::jit::Module module;
  try {
    dev = torch::Device(device);
    module = torch::jit::load(file.string(), dev);
    module.eval();
  } catch (const c10::Error& e) {
    return InvalidArgument(
        file.string() + " is not a TorchScript model libtorch can load: " + FirstLine(Message(e)));
  }
  auto model = std::make_unique<TorchModel>(std::move(module), dev, signature);
  // One row of zeros per input (free dimensions as 1): the answers must fit the signature.
  std::vector<HostTensor> probe;
  for (const TensorSpec& spec : signature.inputs) {
    HostTensor t;
    t.dtype = spec.dtype;
    t.shape = spec.shape;
    for (int64_t& d : t.shape) d = d < 0 ? 1 : d;
    t.shape[0] = 1;
    t.data.assign(static_cast<size_t>(t.elements()) * ElementSize(t.dtype), std::byte{0});
    probe.push_back(std::move(t));
  }
  try {
    std::vector<HostTensor> outs = model->Forward(probe);
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& spec = signature.outputs[i];
      for (size_t d = 1; d < spec.shape.size(); ++d) {
        if (outs[i].shape.size() != spec.shape.size() ||
            (spec.shape[d] >= 0 && outs[i].shape[d] != spec.shape[d])) {
          return InvalidArgument(file.string() + ": output '" + spec.name + "' has shape " +
                                 ShapeString(outs[i].shape) + " for one row; model.json says " +
                                 ShapeString(spec.shape));
        }
      }
    }
  } catch (const ModelError& e) {
    return InvalidArgument(file.string() + ": the model fails on one row of zeros: " + e.what());
  }
  *out = std::move(model);
  return Status::Ok();
}

}  // namespace cadre::serving
