/*
 * restrict.c — the restricted-API table (restrict.h): per category, the
 * header and value a request must carry, parsed from Triton's flag syntax
 * "<category>[,<category>...]:<header>=<value>". Built once at start;
 * only read afterwards.
 */
#include "frontend/security/restrict.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/alloc.h"

#define MAX_HEADER 128
#define MAX_VALUE 1024

typedef struct rule {
  char *header; /* lower case; NULL: the category is open */
  char *value;
  size_t value_len;
} rule;

struct hark_restrict {
  rule rules[HARK_API_COUNT];
};

static const char *const names[HARK_API_COUNT] = {
    [HARK_API_HEALTH] = "health",
    [HARK_API_METADATA] = "metadata",
    [HARK_API_INFERENCE] = "inference",
    [HARK_API_SHARED_MEMORY] = "shared-memory",
    [HARK_API_MODEL_CONFIG] = "model-config",
    [HARK_API_MODEL_REPOSITORY] = "model-repository",
    [HARK_API_STATISTICS] = "statistics",
    [HARK_API_TRACE] = "trace",
    [HARK_API_LOGGING] = "logging",
};

const char *hark_api_name(hark_api api) {
  return api > HARK_API_UNSET && api < HARK_API_COUNT ? names[api] : "unknown";
}

hark_restrict *hark_restrict_new(void) { return hark_xcalloc(1, sizeof(hark_restrict)); }

void hark_restrict_free(hark_restrict *r) {
  if (!r) return;
  for (int i = 0; i < HARK_API_COUNT; i++) {
    free(r->rules[i].header);
    free(r->rules[i].value);
  }
  free(r);
}

/* RFC 9110's token characters: what a header name may hold. */
static bool is_token(const char *s, size_t n) {
  if (!n) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (!isalnum(ch) && !strchr("!#$%&'*+-.^_`|~", ch)) return false;
  }
  return true;
}

/* A value goes in a header: visible ASCII and inner spaces, no control
 * characters (nor leading or trailing space, which HTTP strips). */
static bool is_value(const char *s, size_t n) {
  if (!n || s[0] == ' ' || s[n - 1] == ' ') return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f) return false;
  return true;
}

static hark_api api_by_name(const char *s, size_t n) {
  for (int i = HARK_API_UNSET + 1; i < HARK_API_COUNT; i++)
    if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) return (hark_api)i;
  return HARK_API_UNSET;
}

#define CATEGORIES                                                                           \
  "health, metadata, inference, shared-memory, model-config, model-repository, statistics, " \
  "trace, logging"

hark_error *hark_restrict_add(hark_restrict *r, const char *flag, const char *spec) {
  const char *colon = strchr(spec, ':');
  const char *eq = colon ? strchr(colon + 1, '=') : NULL;
  if (!colon || !eq)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s expects <category>[,<category>...]:<header>=<value>, got '%s'", flag,
                          spec);
  const char *header = colon + 1, *value = eq + 1;
  size_t hlen = (size_t)(eq - header), vlen = strlen(value);
  if (!is_token(header, hlen) || hlen > MAX_HEADER)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: '%.*s' is not a valid header name", flag,
                          (int)hlen, header);
  if (!is_value(value, vlen) || vlen > MAX_VALUE)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: the value for header '%.*s' must be 1 to %d printable ASCII "
                          "characters",
                          flag, (int)hlen, header, MAX_VALUE);
  hark_api picked[HARK_API_COUNT];
  int n = 0;
  for (const char *p = spec; p < colon;) {
    const char *comma = memchr(p, ',', (size_t)(colon - p));
    const char *end = comma ? comma : colon;
    hark_api api = api_by_name(p, (size_t)(end - p));
    if (api == HARK_API_UNSET)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: unknown category '%.*s' (one of: %s)", flag,
                            (int)(end - p), p, CATEGORIES);
    if (r->rules[api].header)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "%s: category '%s' is restricted more than once (each category "
                            "takes one header)",
                            flag, names[api]);
    for (int i = 0; i < n; i++)
      if (picked[i] == api)
        return hark_error_new(HARK_ERR_INVALID_ARG, "%s: category '%s' is named twice", flag,
                              names[api]);
    picked[n++] = api;
    p = end + 1;
    if (comma && p == colon)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: empty category before ':' in '%s'", flag,
                            spec);
  }
  if (!n)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: no category before ':' in '%s'", flag, spec);
  for (int i = 0; i < n; i++) {
    rule *ru = &r->rules[picked[i]];
    ru->header = hark_xmalloc(hlen + 1);
    for (size_t k = 0; k < hlen; k++) ru->header[k] = (char)tolower((unsigned char)header[k]);
    ru->header[hlen] = '\0';
    ru->value = hark_xstrdup(value);
    ru->value_len = vlen;
  }
  return NULL;
}

bool hark_restrict_any(const hark_restrict *r) {
  if (!r) return false;
  for (int i = 0; i < HARK_API_COUNT; i++)
    if (r->rules[i].header) return true;
  return false;
}

const char *hark_restrict_header(const hark_restrict *r, hark_api api) {
  if (!r || api <= HARK_API_UNSET || api >= HARK_API_COUNT) return NULL;
  return r->rules[api].header;
}

/* Compares in time that depends on the lengths only, not on where the
 * first difference is: a client cannot find the value byte by byte. */
static bool same(const char *a, size_t alen, const char *b, size_t blen) {
  unsigned char d = alen != blen;
  size_t n = alen < blen ? alen : blen;
  for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

bool hark_restrict_allows(const hark_restrict *r, hark_api api, const char *value, size_t len) {
  if (api <= HARK_API_UNSET || api >= HARK_API_COUNT) return !hark_restrict_any(r);
  if (!r || !r->rules[api].header) return true;
  return value && same(value, len, r->rules[api].value, r->rules[api].value_len);
}

void hark_restrict_message(const hark_restrict *r, hark_api api, char *buf, size_t cap) {
  const char *h = hark_restrict_header(r, api);
  snprintf(buf, cap, "This API is restricted, expecting header '%s'", h ? h : "?");
}

uint32_t hark_restrict_opens(const hark_restrict *r, const uint8_t *name, size_t nlen,
                             const uint8_t *value, size_t vlen) {
  uint32_t mask = 0;
  if (!r) return 0;
  for (int i = HARK_API_UNSET + 1; i < HARK_API_COUNT; i++) {
    const rule *ru = &r->rules[i];
    if (ru->header && strlen(ru->header) == nlen &&
        strncasecmp(ru->header, (const char *)name, nlen) == 0 &&
        same((const char *)value, vlen, ru->value, ru->value_len))
      mask |= 1u << i;
  }
  return mask;
}

/* A state's three masks: the categories opened, those whose header came,
 * and those whose header came more than once. */
#define SEEN_SHIFT 10
#define REPEATED_SHIFT 20
_Static_assert(HARK_API_COUNT <= SEEN_SHIFT, "a state holds three masks of HARK_API_COUNT bits");

void hark_restrict_collect(const hark_restrict *r, uint32_t *state, const uint8_t *name,
                           size_t nlen, const uint8_t *value, size_t vlen) {
  if (!r) return;
  for (int i = HARK_API_UNSET + 1; i < HARK_API_COUNT; i++) {
    const rule *ru = &r->rules[i];
    if (!ru->header || strlen(ru->header) != nlen ||
        strncasecmp(ru->header, (const char *)name, nlen) != 0)
      continue;
    uint32_t bit = 1u << i;
    if (*state & bit << SEEN_SHIFT) {
      *state = (*state & ~bit) | bit << REPEATED_SHIFT;
      continue;
    }
    *state |= bit << SEEN_SHIFT;
    if (same((const char *)value, vlen, ru->value, ru->value_len)) *state |= bit;
  }
}

void hark_restrict_message_state(const hark_restrict *r, hark_api api, uint32_t state, char *buf,
                                 size_t cap) {
  const char *h = hark_restrict_header(r, api);
  bool repeated =
      api > HARK_API_UNSET && api < HARK_API_COUNT && (state >> REPEATED_SHIFT >> api & 1u);
  snprintf(buf, cap, "This API is restricted, expecting header '%s'%s", h ? h : "?",
           repeated ? " once (it was sent more than once)" : "");
}

bool hark_restrict_allows_mask(const hark_restrict *r, hark_api api, uint32_t opened) {
  if (api <= HARK_API_UNSET || api >= HARK_API_COUNT) return !hark_restrict_any(r);
  if (!r || !r->rules[api].header) return true;
  return (opened >> api) & 1u;
}

bool hark_restrict_is_path(const char *value) {
  return value && (strchr(value, '/') || value[0] == '~');
}
