// Conversions between ps.proto messages, gRPC statuses and cadre types, shared by the service and
// the client. Private to ps/: only .cc files include it, so generated headers never leak.
#pragma once

#include <grpcpp/grpcpp.h>

#include "cadre/base/status.h"
#include "cadre/ps/optimizer.h"
#include "cadre/ps/ps.grpc.pb.h"
#include "cadre/ps/server_state.h"

namespace cadre::ps {

// The full names of ps.proto's methods, the wire contract: the server registers all of them by
// name and the client calls the tensor-carrying ones through a generic stub (wire.h).
inline constexpr char kDeclareMethod[] = "/cadre.ps.proto.ParameterServer/Declare";
inline constexpr char kPushMethod[] = "/cadre.ps.proto.ParameterServer/Push";
inline constexpr char kPullMethod[] = "/cadre.ps.proto.ParameterServer/Pull";
inline constexpr char kPushPullMethod[] = "/cadre.ps.proto.ParameterServer/PushPull";
inline constexpr char kWorkerDoneMethod[] = "/cadre.ps.proto.ParameterServer/WorkerDone";
inline constexpr char kGetStateMethod[] = "/cadre.ps.proto.ParameterServer/GetState";
inline constexpr char kSetStateMethod[] = "/cadre.ps.proto.ParameterServer/SetState";

grpc::StatusCode ToGrpcCode(Code code);
Code FromGrpcCode(grpc::StatusCode code);
grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

void ToProto(const OptimizerConfig& config, proto::OptimizerConfig* out);
Status FromProto(const proto::OptimizerConfig& config, OptimizerConfig* out);
PartitionRef FromProto(const proto::PartitionId& id);
// An optimizer state's float32 vectors as little-endian bytes and back (kInvalidArgument when a
// field's length is not a whole number of floats).
void ToProto(const OptimizerState& state, proto::PartitionState* out);
Status FromProto(const proto::PartitionState& in, OptimizerState* out);
void ToProto(const PartitionRef& id, proto::PartitionId* out);

// gRPC shuts its library down when its last channel or server goes away (grpc_shutdown), and in
// gRPC 1.51 that joins an executor thread that may sit in a poll of up to 10 s: destroying a
// worker's last Client (or exiting the process) stalled for ~10 s about one time in three. Every
// Client and Server calls this first: one library reference held for the rest of the process
// means that shutdown never runs; the process's exit reclaims everything. Thread-safe.
void HoldGrpcLibrary();

}  // namespace cadre::ps
