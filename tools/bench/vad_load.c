/*
 * vad_load.c — closed-loop load on a sequence model over KServe HTTP: N
 * concurrent sequences, each on its own keep-alive connection, each
 * sending its next request as soon as the previous one is answered.
 * bench/vad_throughput.sh drives silero_vad with it.
 *
 *   vad_load HOST PORT MODEL INPUT TxSIZE N SECONDS [WARMUP_SECONDS]
 *
 * Every request carries T frames of SIZE FP32 values, shape [1, T, SIZE]
 * (quiet noise, the same for all; silero_vad: 1x512 is one 32 ms frame,
 * 4x512 a 128 ms chunk) as a binary tensor (Triton's binary tensor
 * extension: a JSON header, Inference-Header-Content-Length, then the raw
 * bytes) with its connection's sequence_id; the first also carries
 * sequence_start, and once the window closes each sequence sends one
 * last request with sequence_end (so the server frees it at once rather
 * than when it idles out, and the next run finds no sequence of this one
 * live). One thread, epoll, so the client costs little beside
 * the server on a small machine. Counts the replies (and their latency)
 * that complete inside the measurement window after the warmup; prints
 * one JSON object. A reply other than 200 counts as an error; the first
 * one is printed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct conn {
  int fd;
  uint64_t seq;
  bool started, ending; /* ending: its END request is out */
  char *out;            /* the request being written */
  size_t out_len, out_off;
  char in[4096]; /* the reply being read (silero's are ~300 bytes) */
  size_t in_len;
  uint64_t sent_ns;
} conn;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *g_host, *g_model, *g_input;
static float *g_frame;
static size_t g_elements, g_frames, g_frame_size;

static void build_request(conn *c) {
  char json[512];
  int jn = snprintf(
      json, sizeof json,
      "{\"inputs\":[{\"name\":\"%s\",\"shape\":[1,%zu,%zu],\"datatype\":\"FP32\","
      "\"parameters\":{\"binary_data_size\":%zu}}],"
      "\"outputs\":[{\"name\":\"speech_prob\",\"parameters\":{\"binary_data\":true}}],"
      "\"parameters\":{\"sequence_id\":%llu%s%s}}",
      g_input, g_frames, g_frame_size, g_elements * 4, (unsigned long long)c->seq,
      c->started ? "" : ",\"sequence_start\":true", c->ending ? ",\"sequence_end\":true" : "");
  size_t body = (size_t)jn + g_elements * 4;
  char head[512];
  int hn = snprintf(head, sizeof head,
                    "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s\r\n"
                    "Content-Type: application/octet-stream\r\n"
                    "Inference-Header-Content-Length: %d\r\nContent-Length: %zu\r\n\r\n",
                    g_model, g_host, jn, body);
  free(c->out);
  c->out_len = (size_t)hn + body;
  c->out = malloc(c->out_len);
  if (!c->out) {
    perror("malloc");
    exit(1);
  }
  memcpy(c->out, head, (size_t)hn);
  memcpy(c->out + hn, json, (size_t)jn);
  memcpy(c->out + hn + jn, g_frame, g_elements * 4);
  c->out_off = 0;
  c->started = true;
}

/* A complete reply in c->in: its length, its status in *status; 0 while
 * incomplete. */
static size_t reply_complete(const conn *c, int *status) {
  const char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
  if (!end) return 0;
  size_t head = (size_t)(end - c->in) + 4;
  size_t body = 0; /* the Content-Length line's (not Inference-Header-Content-Length's) */
  for (const char *line = c->in; line && line < end;
       line = memmem(line, (size_t)(end - line), "\r\n", 2)) {
    if (line != c->in) line += 2;
    if (strncasecmp(line, "content-length:", 15) == 0) body = strtoul(line + 15, NULL, 10);
  }
  if (c->in_len < head + body) return 0;
  *status = atoi(c->in + 9);
  return head + body;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 8) {
    fprintf(stderr, "usage: vad_load HOST PORT MODEL INPUT TxSIZE N SECONDS [WARMUP]\n");
    return 2;
  }
  g_host = argv[1];
  const char *port = argv[2];
  g_model = argv[3];
  g_input = argv[4];
  if (sscanf(argv[5], "%zux%zu", &g_frames, &g_frame_size) != 2) return 2;
  g_elements = g_frames * g_frame_size;
  int n = atoi(argv[6]);
  double seconds = atof(argv[7]), warmup = argc > 8 ? atof(argv[8]) : 1.0;
  if (g_elements == 0 || n <= 0 || seconds <= 0) return 2;

  g_frame = malloc(g_elements * 4);
  uint64_t rng = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < g_elements; i++) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    g_frame[i] = (float)((int)(rng >> 40 & 0xffff) - 32768) / 32768.0f * 0.01f;
  }

  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
  if (getaddrinfo(g_host, port, &hints, &ai) != 0) {
    fprintf(stderr, "vad_load: cannot resolve %s:%s\n", g_host, port);
    return 1;
  }
  int ep = epoll_create1(0);
  conn *conns = calloc((size_t)n, sizeof *conns);
  uint64_t base = ((uint64_t)getpid() << 20) + 1;
  for (int i = 0; i < n; i++) {
    conn *c = &conns[i];
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0 || connect(c->fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      fprintf(stderr, "vad_load: connect: %s\n", strerror(errno));
      return 1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->seq = base + (uint64_t)i;
    build_request(c);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
  }
  freeaddrinfo(ai);

  uint64_t start = now_ns();
  uint64_t measure_from = start + (uint64_t)(warmup * 1e9);
  uint64_t stop_at = measure_from + (uint64_t)(seconds * 1e9);
  size_t cap = 1 << 20, n_lat = 0, errors = 0;
  uint64_t *lat = malloc(cap * sizeof *lat);
  bool printed = false;
  struct epoll_event evs[256];
  /* After stop_at, until every sequence's END is answered (at most 30 s). */
  uint64_t drain_until = stop_at + 30000000000ull;
  int open = n;
  for (uint64_t now = now_ns(); now < stop_at || (open > 0 && now < drain_until); now = now_ns()) {
    int k = epoll_wait(ep, evs, 256, 100);
    for (int e = 0; e < k; e++) {
      conn *c = evs[e].data.ptr;
      if (c->out_off < c->out_len && (evs[e].events & EPOLLOUT)) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w > 0) {
          if (c->out_off == 0) c->sent_ns = now_ns();
          c->out_off += (size_t)w;
        }
        if (c->out_off == c->out_len) {
          struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
          epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        }
      }
      if (!(evs[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      ssize_t r = read(c->fd, c->in + c->in_len, sizeof c->in - c->in_len);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        fprintf(stderr, "vad_load: sequence %llu: connection closed\n", (unsigned long long)c->seq);
        return 1;
      }
      c->in_len += (size_t)r;
      int status = 0;
      size_t used = reply_complete(c, &status);
      if (!used) {
        if (c->in_len == sizeof c->in) {
          fprintf(stderr, "vad_load: reply too large\n");
          return 1;
        }
        continue;
      }
      uint64_t t = now_ns();
      if (c->sent_ns >= measure_from && t < stop_at) {
        if (status != 200) {
          errors++;
        } else if (n_lat < cap) {
          lat[n_lat++] = t - c->sent_ns;
        }
      }
      if (status != 200 && !printed) {
        fprintf(stderr, "vad_load: HTTP %d: %.*s\n", status, (int)c->in_len, c->in);
        printed = true;
      }
      memmove(c->in, c->in + used, c->in_len - used);
      c->in_len -= used;
      if (c->ending) { /* its END was answered */
        open--;
        struct epoll_event ev = {.events = 0, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        continue;
      }
      if (t >= stop_at) c->ending = true;
      build_request(c);
      struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
      epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
  }
  qsort(lat, n_lat, sizeof *lat, cmp_u64);
  double p50 = n_lat ? lat[n_lat / 2] / 1e3 : 0, p99 = n_lat ? lat[n_lat * 99 / 100] / 1e3 : 0;
  printf(
      "{\"sequences\": %d, \"seconds\": %.3f, \"requests\": %zu, \"frames\": %zu, "
      "\"frames_per_sec\": %.1f, \"errors\": %zu, \"p50_us\": %.0f, \"p99_us\": %.0f}\n",
      n, seconds, n_lat, n_lat * g_frames, (double)(n_lat * g_frames) / seconds, errors, p50, p99);
  for (int i = 0; i < n; i++) {
    close(conns[i].fd);
    free(conns[i].out);
  }
  free(conns);
  free(lat);
  free(g_frame);
  return errors ? 3 : 0;
}
