/* Comma-separated config lists, trimmed, empty entries skipped: the rule every build of the
 * example gates follows. */
#ifndef LIST_H
#define LIST_H

#include <stddef.h>
#include <string.h>

#include "answerer.h"

typedef struct {
  const char *ptr;
  size_t len;
} slice;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Calls visit(entry, ctx) for each non-empty trimmed entry of the config value `key` until it
 * returns non-zero; returns that value, or 0. */
static int each_listed(const char *key, int (*visit)(slice, void *), void *ctx) {
  answerer_string_t k, value;
  answerer_string_set(&k, key);
  if (!approval_plugin_host_config(&k, &value)) return 0;
  int found = 0;
  const char *p = (const char *)value.ptr, *end = p + value.len;
  while (!found && p <= end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma ? comma : end;
    const char *a = p, *b = stop;
    while (a < b && is_space(*a)) a++;
    while (b > a && is_space(b[-1])) b--;
    if (b > a) found = visit((slice){a, (size_t)(b - a)}, ctx);
    p = stop + 1;
  }
  answerer_string_free(&value);
  return found;
}

#endif
