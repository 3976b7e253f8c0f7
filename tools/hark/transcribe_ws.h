/*
 * transcribe_ws.h — `hark transcribe`'s WebSocket driver: the jobs as
 * Vosk streams on one libwebsockets context (transcribe_ws.c).
 */
#ifndef HARK_TOOLS_TRANSCRIBE_WS_H
#define HARK_TOOLS_TRANSCRIBE_WS_H

#include "transcribe_job.h"

/* Runs every job of `run` over WebSocket. Returns 0 when the jobs ran
 * (each has its status), -1 (with a message) when the server cannot be
 * reached or memory ran out. */
int tr_ws_run(tr_run *run);

#endif
