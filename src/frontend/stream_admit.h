/*
 * stream_admit.h — whether a speech model can take one more stream, the
 * same rule for every streaming front end (WebSocket, gRPC).
 */
#ifndef HARK_STREAM_ADMIT_H
#define HARK_STREAM_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/server.h"

/* True when the model already has more requests waiting than `limit` (0:
 * 4 per instance): admitting another stream would make every admitted
 * stream late, so the new one is told to come back, as Triton answers a
 * full queue. Writes the reason into msg. */
bool hark_stream_model_overloaded(const hark_model *model, uint32_t limit, char *msg, size_t len);

#endif
