/*
 * kserve_grpc.h — KServe v2 over gRPC: what kserve_grpc.c (the method
 * tables, and the methods that are not inference), kserve_grpc_infer.c
 * (ModelInfer, ModelStreamInfer) and config_pb.c (a model config as
 * inference.ModelConfig) share, and the service's registration.
 */
#ifndef HARK_FRONTEND_KSERVE_GRPC_H
#define HARK_FRONTEND_KSERVE_GRPC_H

#include "frontend/grpc/grpc.h"
#include "frontend/kserve/kserve.h"
#include "grpc_service.pb-c.h"
#include "hark/server.h"
#include "util/arena.h"

/* Registers inference.GRPCInferenceService and grpc.health.v1.Health. */
hark_error *hark_kserve_grpc_register(hark_grpc *g, hark_kserve *ks);

/* The methods of kserve_grpc_infer.c. */
void hark_kserve_grpc_infer(hark_grpc_call *c, ProtobufCMessage *msg);
void hark_kserve_grpc_stream_infer(hark_grpc_call *c, ProtobufCMessage *msg);
/* A ModelStreamInfer message refused before it was read (the in-flight
 * bounds): its error, with its id, goes in the stream in its place. */
void hark_kserve_grpc_stream_infer_refused(hark_grpc_call *c, const uint8_t *p, size_t n,
                                           const char *why);

/*
 * Fills `req` (fresh from hark_request_new) from a ModelInferRequest: id,
 * parameters (priority, timeout, sequence_id/start/end interpreted, the
 * rest passed on as strings), inputs (raw_input_contents in place, typed
 * contents converted once into a buffer attached to the request) and
 * requested outputs. The message must outlive the request (attach it).
 * *sequence_id: the request's sequence_id parameter, to echo; or NULL.
 * Inputs and outputs with shared_memory_* parameters use regions of `shm`
 * (NULL: off, an error), held by the request; raw_input_contents then has
 * one entry per input not in shared memory. *out_shm (may be NULL): the
 * region of each requested output in shared memory (NULL entries for the
 * others), or NULL when none is; owned by the request.
 */
hark_error *hark_kserve_grpc_to_request(const Inference__ModelInferRequest *q, hark_shm *shm,
                                        hark_request *req,
                                        const Inference__InferParameter **sequence_id,
                                        hark_shm_region ***out_shm);

/* A model's config as inference.ModelConfig, its parts in `a`. */
Inference__ModelConfig *hark_kserve_config_pb(hark_arena *a, const hark_model_config *cfg);

#endif
