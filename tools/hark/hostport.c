/* hostport.c — see hostport.h. */
#include "hostport.h"

#include <string.h>

int hark_split_hostport(const char *s, const char *default_port, char *host, size_t host_cap,
                        char *port, size_t port_cap) {
  if (strncmp(s, "http://", 7) == 0) s += 7;
  size_t n = strcspn(s, "/"); /* tolerate a trailing slash or path */
  const char *h = s, *p = NULL;
  size_t hlen = n;
  if (*s == '[') { /* [v6]:port */
    const char *close = memchr(s, ']', n);
    if (!close) return -1;
    h = s + 1;
    hlen = (size_t)(close - h);
    if (close + 1 < s + n) {
      if (close[1] != ':') return -1;
      p = close + 2;
    }
  } else {
    const char *colon = memchr(s, ':', n);
    /* More than one colon without brackets: a bare IPv6 address. */
    if (colon && !memchr(colon + 1, ':', (size_t)(s + n - colon - 1))) {
      hlen = (size_t)(colon - s);
      p = colon + 1;
    }
  }
  size_t plen = p ? (size_t)(s + n - p) : strlen(default_port);
  if (!p) p = default_port;
  if (hlen == 0 || hlen >= host_cap || plen == 0 || plen >= port_cap) return -1;
  if (strspn(p, "0123456789") < plen) return -1;
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  memcpy(port, p, plen);
  port[plen] = '\0';
  return 0;
}
