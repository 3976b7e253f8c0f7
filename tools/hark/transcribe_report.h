/*
 * transcribe_report.h — `hark transcribe`'s end-of-run report
 * (transcribe_report.c).
 */
#ifndef HARK_TOOLS_TRANSCRIBE_REPORT_H
#define HARK_TOOLS_TRANSCRIBE_REPORT_H

#include "transcribe_job.h"

/* Prints the end-of-run report (text) or the one JSON object (--json). */
void tr_report(tr_run *r);

#endif
