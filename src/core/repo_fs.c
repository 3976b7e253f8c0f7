/*
 * repo_fs.c — the model repository on disk (see repo_fs.h).
 */
#include "core/repo_fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *hark_repo_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    if (size >= 0 && size < (64 << 20) && fseek(f, 0, SEEK_SET) == 0) {
      buf = malloc((size_t)size + 1);
      if (buf) {
        *len = fread(buf, 1, (size_t)size, f);
        buf[*len] = '\0';
      }
    }
  }
  fclose(f);
  return buf;
}

bool hark_repo_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A model name names one folder directly under the repository. */
bool hark_repo_name_is_safe(const char *name) {
  return name && *name && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 && !strchr(name, '/') &&
         strlen(name) < 256;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Numbered version folders of a model, ascending. */
int64_t *hark_repo_list_versions(const char *path, uint32_t *n) {
  *n = 0;
  DIR *d = opendir(path);
  if (!d) return NULL;
  int64_t *v = NULL;
  uint32_t cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    errno = 0;
    long long x = strtoll(e->d_name, &end, 10);
    if (!e->d_name[0] || *end || errno || x < 0) continue;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    if (!hark_repo_is_dir(sub)) continue;
    if (*n == cap) {
      cap = cap ? cap * 2 : 8;
      int64_t *g = realloc(v, cap * sizeof *v);
      if (!g) break;
      v = g;
    }
    v[(*n)++] = x;
  }
  closedir(d);
  if (*n) qsort(v, *n, sizeof *v, cmp_i64);
  return v;
}

/* Applies the version policy in place; returns how many remain. */
uint32_t hark_repo_apply_policy(const hark_version_policy *p, int64_t *v, uint32_t n) {
  if (p->kind == HARK_VERSION_ALL) return n;
  if (p->kind == HARK_VERSION_LATEST) {
    uint32_t keep = p->latest_num_versions ? p->latest_num_versions : 1;
    if (keep >= n) return n;
    memmove(v, v + (n - keep), keep * sizeof *v);
    return keep;
  }
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < p->n_versions; j++)
      if (v[i] == p->versions[j]) {
        v[k++] = v[i];
        break;
      }
  return k;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Adds every file and folder under `dir` (relative name, size, mtime) to
 * *sum. A sum, so readdir's order does not matter. Bounded in depth and
 * count: a model folder is small. */
static void sig_walk(const char *dir, const char *rel, int depth, uint64_t *sum, uint32_t *budget) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) && *budget) {
    if (e->d_name[0] == '.') continue;
    char path[4096], name[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    snprintf(name, sizeof name, "%s/%s", rel, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    (*budget)--;
    uint64_t h = fnv(0xcbf29ce484222325ull, name, strlen(name));
    h = fnv(h, &(uint64_t){S_ISDIR(st.st_mode)}, 8);
    if (S_ISDIR(st.st_mode)) {
      if (depth < 4) sig_walk(path, name, depth + 1, sum, budget);
    } else {
      h = fnv(h, &(int64_t){(int64_t)st.st_size}, 8);
      h = fnv(h, &(int64_t){(int64_t)st.st_mtim.tv_sec}, 8);
      h = fnv(h, &(int64_t){(int64_t)st.st_mtim.tv_nsec}, 8);
    }
    *sum += mix(h);
  }
  closedir(d);
}

/* The signature of a model folder: changes when config.pbtxt's content or
 * any file or version folder under it changes (name, size, mtime). */
uint64_t hark_repo_signature(const char *path) {
  uint64_t sum = 0;
  uint32_t budget = 10000;
  sig_walk(path, "", 0, &sum, &budget);
  char file[4096];
  snprintf(file, sizeof file, "%s/config.pbtxt", path);
  size_t len = 0;
  char *text = hark_repo_read_file(file, &len);
  if (text) sum += mix(fnv(0x84222325cbf29ce4ull, text, len));
  free(text);
  return sum;
}

/* Model folders of the repository, sorted. */
char **hark_repo_scan(const char *repo, uint32_t *n) {
  *n = 0;
  DIR *d = opendir(repo);
  if (!d) return NULL;
  char **names = NULL;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", repo, e->d_name);
    if (!hark_repo_is_dir(path)) continue;
    char **g = realloc(names, (*n + 1) * sizeof *g);
    if (!g) break;
    names = g;
    names[(*n)++] = strdup(e->d_name);
  }
  closedir(d);
  for (uint32_t i = 1; i < *n; i++) /* few names: insertion sort */
    for (uint32_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      char *t = names[j];
      names[j] = names[j - 1];
      names[j - 1] = t;
    }
  return names;
}
