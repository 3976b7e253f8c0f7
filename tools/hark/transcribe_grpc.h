/*
 * transcribe_grpc.h — `hark transcribe`'s gRPC driver: the jobs as Riva
 * StreamingRecognize calls on one completion queue (transcribe_grpc.c).
 */
#ifndef HARK_TOOLS_TRANSCRIBE_GRPC_H
#define HARK_TOOLS_TRANSCRIBE_GRPC_H

#include "transcribe_job.h"

/* Runs every job of `run` over gRPC. Returns 0 when the jobs ran (each
 * has its status), -1 (with a message) when the server cannot be reached
 * or memory ran out. */
int tr_grpc_run(tr_run *run, const tr_file *files);

#endif
