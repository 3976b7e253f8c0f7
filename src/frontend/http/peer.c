/*
 * peer.c — who a connection's client is: the address of the socket's
 * peer, which the services put on their requests (hark_request_client)
 * so that a backend can share what all clients share per client. The IP
 * only (one client opens many connections, each from its own port), and
 * an IPv4 client of an IPv6 socket as IPv4, so that it is one client
 * whichever listen socket it reached. Read once per connection, on the loop's
 * thread.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "frontend/http/http_impl.h"

void hark_http_fd_peer(int fd, char *buf) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  buf[0] = '\0';
  if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &len) != 0) return;
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, HARK_PEER_MAX);
  } else if (ss.ss_family == AF_INET6) {
    const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a)) /* one client, whichever socket it reached */
      inet_ntop(AF_INET, a->s6_addr + 12, buf, HARK_PEER_MAX);
    else
      inet_ntop(AF_INET6, a, buf, HARK_PEER_MAX);
  }
}
