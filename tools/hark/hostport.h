/*
 * hostport.h — the one piece of address syntax every hark subcommand
 * reads: "HOST:PORT", "[V6]:PORT" or "HOST", with an optional scheme in
 * front and path behind.
 */
#ifndef HARK_TOOLS_HOSTPORT_H
#define HARK_TOOLS_HOSTPORT_H

#include <stddef.h>

/* Splits "HOST:PORT", "[V6]:PORT" or "HOST" (then default_port) into
 * parts; an "http://" in front and a "/..." behind are skipped. Returns 0,
 * or -1 when it does not fit (or the port is not a number). */
int hark_split_hostport(const char *s, const char *default_port, char *host, size_t host_cap,
                        char *port, size_t port_cap);

#endif
