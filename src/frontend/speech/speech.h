/*
 * speech.h — the streaming speech services: Vosk's WebSocket protocol
 * (vosk.c) on the HTTP transport and Riva's RivaSpeechRecognition
 * (riva.c) on the gRPC transport, both codecs over speech sessions
 * (session.h).
 */
#ifndef HARK_FRONTEND_SPEECH_H
#define HARK_FRONTEND_SPEECH_H

#include <stddef.h>
#include <stdint.h>

#include "frontend/grpc/grpc.h"
#include "frontend/http/http.h"
#include "hark/server.h"

typedef struct hark_speech_options {
  const char *speech_model; /* the model a stream naming none runs on; "asr" */
  uint32_t max_streams;     /* streams open at once, per protocol; 0: 1024 */
  uint32_t backlog_limit;   /* refuse new streams while the model has more
                               requests waiting; 0: 4 per instance */
  size_t ws_max_message;    /* the WebSocket transport's message limit */
  uint32_t sample_rate;     /* of a PCM stream that names none; 0: the model's
                               default_sample_rate */
} hark_speech_options;

/* Vosk over WebSocket: the service state and its handler table for the
 * HTTP transport (hark_http_handler.ws, with ws_userp = the service). */
typedef struct hark_vosk hark_vosk;
hark_vosk *hark_vosk_new(hark_server *server, const hark_speech_options *opts);
void hark_vosk_free(hark_vosk *v);
const hark_ws_handler *hark_vosk_ws_handler(void);

/* Riva over gRPC: the service state, and its registration of
 * nvidia.riva.asr.RivaSpeechRecognition on the gRPC transport (free it
 * after the transport). */
typedef struct hark_riva hark_riva;
hark_riva *hark_riva_new(hark_server *server, const hark_speech_options *opts);
hark_error *hark_riva_register(hark_grpc *g, hark_riva *r);
void hark_riva_free(hark_riva *r);

#endif
