/* The one config check every C example gate makes in `validate-config` (plugin API 0.2): every
 * key must be one the gate reads, so a typo cannot silently disable it. */
#ifndef CONFIG_KEYS_H
#define CONFIG_KEYS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answerer.h"

/* True when every key of `config` is in the NULL-terminated `keys`; otherwise sets `err` to
 * "unknown key \"<key>\": <name> reads only <known>" (owned by the caller). Frees `config`. */
static bool only_keys(answerer_list_tuple2_string_string_t *config, const char *const *keys,
                      const char *name, const char *known, answerer_string_t *err) {
  bool ok = true;
  for (size_t i = 0; ok && i < config->len; i++) {
    answerer_string_t *key = &config->ptr[i].f0;
    int found = 0;
    for (const char *const *k = keys; *k && !found; k++)
      found = strlen(*k) == key->len && memcmp(*k, key->ptr, key->len) == 0;
    if (!found) {
      const char *format = "unknown key \"%.*s\": %s reads only %s";
      int n = snprintf(NULL, 0, format, (int)key->len, (const char *)key->ptr, name, known);
      char *text = malloc((size_t)n + 1);
      snprintf(text, (size_t)n + 1, format, (int)key->len, (const char *)key->ptr, name, known);
      err->ptr = (uint8_t *)text;
      err->len = (size_t)n;
      ok = false;
    }
  }
  answerer_list_tuple2_string_string_free(config);
  return ok;
}

#endif
