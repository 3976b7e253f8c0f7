/*
 * main.c — `hark`, the command-line client of harkd: dispatches
 * `hark SUBCOMMAND ARGS...` to the subcommand's own main.
 *
 * A subcommand is one row of `commands` (and its prototype in cli.h);
 * `hark help SUBCOMMAND` simply runs `SUBCOMMAND --help`, so each
 * subcommand documents itself in one place.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifndef HARK_VERSION
#define HARK_VERSION "0.1.0"
#endif

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command commands[] = {
    {"perf", hark_perf_main,
     "measure a model's throughput and latency under load (like perf_analyzer)"},
    {"transcribe", hark_transcribe_main,
     "stream WAV files to the speech model; transcripts, RTFX, latency"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const command *find_command(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static void usage(FILE *f) {
  fprintf(f, "usage: hark COMMAND [ARGS...]\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "  %-12s %s\n", "help", "show help for a command: hark help COMMAND");
  fprintf(f, "\noptions:\n  -h, --help   this help\n  --version    print the version\n");
}

static int unknown(const char *name) {
  fprintf(stderr, "hark: unknown command '%s'\n\n", name);
  usage(stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *name = argv[1];
  if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(name, "--version") == 0) {
    printf("hark %s\n", HARK_VERSION);
    return 0;
  }
  if (strcmp(name, "help") == 0) {
    if (argc < 3) {
      usage(stdout);
      return 0;
    }
    const command *cmd = find_command(argv[2]);
    if (!cmd) return unknown(argv[2]);
    char *help_argv[] = {(char *)cmd->name, "--help", NULL};
    return cmd->run(2, help_argv);
  }
  const command *cmd = find_command(name);
  if (!cmd) return unknown(name);
  return cmd->run(argc - 1, argv + 1);
}
