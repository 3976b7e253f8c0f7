/*
 * cli.h — the subcommands of the `hark` command-line tool.
 *
 * Each subcommand is one function with main()'s signature, called with
 * argv[0] set to the subcommand's name; it parses its own options and
 * returns the process exit status. main.c lists them in one table.
 */
#ifndef HARK_TOOLS_CLI_H
#define HARK_TOOLS_CLI_H

/* `hark perf`: a closed-loop load generator like Triton's perf_analyzer. */
int hark_perf_main(int argc, char **argv);

/* `hark transcribe`: a streaming speech client (Vosk WebSocket protocol)
 * that reports RTFX and chunk/final latency like Riva's streaming client. */
int hark_transcribe_main(int argc, char **argv);

#endif
