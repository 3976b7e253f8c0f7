/* Unit tests for src/frontend/kserve/shm.c: the system shared-memory
 * registry (register, unregister, status, spans, reference counts), on
 * real POSIX shm objects made here. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "frontend/kserve/shm.h"

/* A fresh shm object of `size` bytes filled with its byte index; its key
 * in `key`. The caller unlinks it. Returns the fd. */
static int make_object(char *key, size_t keylen, size_t size) {
  static int n;
  snprintf(key, keylen, "/hark_unit_%d_%d", (int)getpid(), ++n);
  int fd = shm_open(key, O_CREAT | O_EXCL | O_RDWR, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)size), 0);
  unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(p != MAP_FAILED);
  for (size_t i = 0; i < size; i++) p[i] = (unsigned char)i;
  munmap(p, size);
  return fd;
}

static void expect_error(hark_error *err, hark_code code, const char *text) {
  assert_non_null(err);
  if (!strstr(hark_error_message(err), text))
    fail_msg("'%s' not in '%s'", text, hark_error_message(err));
  assert_int_equal(hark_error_code(err), code);
  hark_error_free(err);
}

static void test_register_status_unregister(void **state) {
  (void)state;
  char k1[64], k2[64];
  int f1 = make_object(k1, sizeof k1, 8192), f2 = make_object(k2, sizeof k2, 100);
  hark_shm *shm = hark_shm_new(0);
  assert_null(hark_shm_register(shm, "b", k1, 4096 + 10, 100)); /* mid-page offset */
  assert_null(hark_shm_register(shm, "a", k2, 0, 100));
  hark_shm_status *st;
  size_t n;
  assert_null(hark_shm_status_get(shm, NULL, &st, &n));
  assert_int_equal(n, 2);
  assert_string_equal(st[0].name, "a"); /* sorted */
  assert_string_equal(st[1].name, "b");
  assert_string_equal(st[1].key, k1);
  assert_int_equal(st[1].offset, 4106);
  assert_int_equal(st[1].byte_size, 100);
  hark_shm_status_free(st, n);
  assert_null(hark_shm_status_get(shm, "b", &st, &n));
  assert_int_equal(n, 1);
  hark_shm_status_free(st, n);
  expect_error(hark_shm_status_get(shm, "zzz", &st, &n), HARK_ERR_INVALID_ARG,
               "Unable to find system shared memory region: 'zzz'");
  /* the region's bytes are the object's from its offset */
  hark_shm_region *r;
  void *p;
  assert_null(hark_shm_acquire(shm, "b", &r));
  assert_null(hark_shm_span(r, 5, 10, "input 'X'", &p));
  assert_int_equal(*(unsigned char *)p, (unsigned char)(4106 + 5));
  hark_shm_release(r);
  hark_shm_unregister(shm, "a");
  hark_shm_unregister(shm, "a"); /* idempotent */
  assert_null(hark_shm_status_get(shm, NULL, &st, &n));
  assert_int_equal(n, 1);
  hark_shm_status_free(st, n);
  hark_shm_unregister(shm, NULL);
  assert_null(hark_shm_status_get(shm, NULL, &st, &n));
  assert_int_equal(n, 0);
  hark_shm_status_free(st, n);
  hark_shm_free(shm);
  shm_unlink(k1);
  shm_unlink(k2);
  close(f1);
  close(f2);
}

static void test_bad_registrations(void **state) {
  (void)state;
  char key[64];
  int fd = make_object(key, sizeof key, 100);
  hark_shm *shm = hark_shm_new(0);
  assert_null(hark_shm_register(shm, "r", key, 0, 100));
  expect_error(hark_shm_register(shm, "r", key, 0, 10), HARK_ERR_ALREADY_EXISTS,
               "shared memory region 'r' already in manager");
  expect_error(hark_shm_register(shm, "s", key, 50, 51), HARK_ERR_INVALID_ARG, "beyond the end");
  expect_error(hark_shm_register(shm, "s", key, 4096, 1), HARK_ERR_INVALID_ARG, "beyond the end");
  expect_error(hark_shm_register(shm, "s", key, UINT64_MAX, 2), HARK_ERR_INVALID_ARG, "too large");
  expect_error(hark_shm_register(shm, "s", key, 0, 0), HARK_ERR_INVALID_ARG, "more than 0");
  expect_error(hark_shm_register(shm, "s", "/hark_unit_none", 0, 1), HARK_ERR_INVALID_ARG,
               "/hark_unit_none");
  expect_error(hark_shm_register(shm, "s", "", 0, 1), HARK_ERR_INVALID_ARG, "key");
  expect_error(hark_shm_register(shm, "", key, 0, 1), HARK_ERR_INVALID_ARG, "name");
  hark_shm_region *r;
  expect_error(hark_shm_acquire(shm, "s", &r), HARK_ERR_INVALID_ARG, "'s'");
  assert_null(r);
  hark_shm_free(shm);
  shm_unlink(key);
  close(fd);
}

static void test_spans(void **state) {
  (void)state;
  char key[64];
  int fd = make_object(key, sizeof key, 256);
  hark_shm *shm = hark_shm_new(0);
  assert_null(hark_shm_register(shm, "r", key, 100, 100));
  hark_shm_region *r;
  void *p;
  assert_null(hark_shm_acquire(shm, "r", &r));
  assert_string_equal(hark_shm_region_name(r), "r");
  assert_int_equal(hark_shm_region_size(r), 100);
  assert_null(hark_shm_span(r, 0, 100, "x", &p));
  assert_null(hark_shm_span(r, 100, 0, "x", &p));
  expect_error(hark_shm_span(r, 90, 11, "input 'IN'", &p), HARK_ERR_INVALID_ARG,
               "input 'IN': shared_memory_offset 90 + shared_memory_byte_size 11 is beyond "
               "shared memory region 'r' (100 bytes)");
  assert_null(p);
  expect_error(hark_shm_span(r, 101, 0, "x", &p), HARK_ERR_INVALID_ARG, "beyond");
  expect_error(hark_shm_span(r, UINT64_MAX, 2, "x", &p), HARK_ERR_INVALID_ARG, "beyond");
  expect_error(hark_shm_span(r, 1, UINT64_MAX, "x", &p), HARK_ERR_INVALID_ARG, "beyond");
  /* truncated below the region after registration: an error, not SIGBUS */
  assert_int_equal(ftruncate(fd, 150), 0);
  assert_null(hark_shm_span(r, 0, 50, "x", &p));
  assert_int_equal(*(unsigned char *)p, 100);
  expect_error(hark_shm_span(r, 0, 51, "output 'Y'", &p), HARK_ERR_INVALID_ARG,
               "output 'Y': shared memory region 'r' is no longer valid");
  /* unlinked and truncated to nothing */
  shm_unlink(key);
  assert_int_equal(ftruncate(fd, 0), 0);
  expect_error(hark_shm_span(r, 0, 1, "x", &p), HARK_ERR_INVALID_ARG, "truncated to 0 bytes");
  hark_shm_release(r);
  hark_shm_free(shm);
  close(fd);
}

static void test_unregister_while_held(void **state) {
  (void)state;
  char key[64];
  int fd = make_object(key, sizeof key, 64);
  hark_shm *shm = hark_shm_new(0);
  assert_null(hark_shm_register(shm, "held", key, 0, 64));
  hark_shm_region *r1, *r2;
  assert_null(hark_shm_acquire(shm, "held", &r1));
  assert_null(hark_shm_acquire(shm, "held", &r2));
  hark_shm_unregister(shm, "held");
  hark_shm_region *none;
  expect_error(hark_shm_acquire(shm, "held", &none), HARK_ERR_INVALID_ARG, "'held'");
  /* the name may be registered again while the old region is in use */
  assert_null(hark_shm_register(shm, "held", key, 0, 32));
  void *p;
  assert_null(hark_shm_span(r1, 60, 4, "x", &p)); /* still the old 64-byte mapping */
  memset(p, 0xab, 4);
  hark_shm_release(r1);
  assert_null(hark_shm_span(r2, 60, 4, "x", &p)); /* mapped until the last user lets go */
  assert_int_equal(*(unsigned char *)p, 0xab);
  hark_shm_release(r2);
  /* freeing the registry with a region still held leaves it to its user */
  hark_shm_region *r3;
  assert_null(hark_shm_acquire(shm, "held", &r3));
  hark_shm_free(shm);
  assert_null(hark_shm_span(r3, 0, 32, "x", &p));
  hark_shm_release(r3);
  hark_shm_release(NULL);
  shm_unlink(key);
  close(fd);
}

/* Several threads acquire, read and release while another registers and
 * unregisters the same name: no use after unmap (ASan would see it). */
typedef struct race {
  hark_shm *shm;
  int stop;
  long reads;
} race;

static void *reader(void *arg) {
  race *rc = arg;
  while (!__atomic_load_n(&rc->stop, __ATOMIC_ACQUIRE)) {
    hark_shm_region *r;
    hark_error *err = hark_shm_acquire(rc->shm, "hot", &r);
    if (err) {
      hark_error_free(err);
      continue;
    }
    void *p;
    assert_null(hark_shm_span(r, 0, 64, "x", &p));
    volatile unsigned char c = ((unsigned char *)p)[63];
    (void)c;
    hark_shm_release(r);
    __atomic_fetch_add(&rc->reads, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  char key[64];
  int fd = make_object(key, sizeof key, 64);
  race rc = {.shm = hark_shm_new(0)};
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, reader, &rc);
  for (int i = 0; i < 2000; i++) {
    hark_error *err = hark_shm_register(rc.shm, "hot", key, 0, 64);
    assert_null(err);
    hark_shm_unregister(rc.shm, "hot");
  }
  assert_null(hark_shm_register(rc.shm, "hot", key, 0, 64));
  while (__atomic_load_n(&rc.reads, __ATOMIC_RELAXED) < 100) usleep(1000);
  __atomic_store_n(&rc.stop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  hark_shm_free(rc.shm);
  shm_unlink(key);
  close(fd);
}

/* The registry holds at most its cap; an unregistered region makes room. */
static void test_cap(void **state) {
  (void)state;
  char key[64];
  int fd = make_object(key, sizeof key, 256);
  hark_shm *shm = hark_shm_new(2);
  assert_null(hark_shm_register(shm, "c0", key, 0, 256));
  assert_null(hark_shm_register(shm, "c1", key, 0, 256));
  expect_error(hark_shm_register(shm, "c2", key, 0, 256), HARK_ERR_RESOURCE_EXHAUSTED,
               "at most 2 (--shared-memory-max-regions)");
  hark_shm_unregister(shm, "c0");
  assert_null(hark_shm_register(shm, "c2", key, 0, 256));
  hark_shm_unregister(shm, NULL);
  assert_null(hark_shm_register(shm, "c0", key, 0, 256));
  hark_shm_free(shm);
  shm_unlink(key);
  close(fd);
}

/* Copies go through the descriptor: a truncated object is an error, never
 * a fault, and a write lands in the object. */
static void test_read_write(void **state) {
  (void)state;
  char key[64];
  int fd = make_object(key, sizeof key, 8192);
  hark_shm *shm = hark_shm_new(0);
  assert_null(hark_shm_register(shm, "rw", key, 4096 + 10, 100));
  hark_shm_region *r;
  assert_null(hark_shm_acquire(shm, "rw", &r));
  unsigned char buf[100];
  assert_null(hark_shm_read(r, 5, 10, "input 'X'", buf));
  assert_int_equal(buf[0], (unsigned char)(4106 + 5));
  assert_null(hark_shm_write(r, 0, "hello", 5, "output 'Y'"));
  assert_null(hark_shm_read(r, 0, 5, "x", buf));
  assert_memory_equal(buf, "hello", 5);
  assert_int_equal(ftruncate(fd, 4096 + 50), 0);
  expect_error(hark_shm_read(r, 0, 100, "input 'X'", buf), HARK_ERR_INVALID_ARG, "truncated");
  expect_error(hark_shm_write(r, 60, "x", 1, "output 'Y'"), HARK_ERR_INVALID_ARG, "truncated");
  hark_shm_release(r);
  hark_shm_free(shm);
  shm_unlink(key);
  close(fd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register_status_unregister),
      cmocka_unit_test(test_bad_registrations),
      cmocka_unit_test(test_spans),
      cmocka_unit_test(test_unregister_while_held),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_cap),
      cmocka_unit_test(test_read_write),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
