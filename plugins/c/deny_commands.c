/* deny-commands gate (C, plugin API 0.2): rejects a call whose `command` argument contains one
 * of the configured `patterns` (comma-separated substrings), saying why: the deployment's
 * `reason` when it sets one, else `the command contains "<pattern>", which this deployment does
 * not allow`. A call without recorded arguments or a string `command` is not this gate's to
 * judge: it says `next`. `patterns` and `reason` are its only config keys; any other is refused
 * at load. */
#include <stdio.h>
#include <stdlib.h>

#include "answerer.h"
#include "config_keys.h"
#include "json_command.h"
#include "list.h"

static const char *const KEYS[] = {"patterns", "reason", NULL};

bool exports_answerer_validate_config(answerer_list_tuple2_string_string_t *config,
                                      answerer_string_t *err) {
  return only_keys(config, KEYS, "deny-commands", "\"patterns\" and \"reason\"", err);
}

typedef struct {
  json_buf *command;
  slice matched;
} search;

static int contains(slice pattern, void *ctx) {
  search *s = ctx;
  if (pattern.len > s->command->len) return 0;
  for (size_t i = 0; i + pattern.len <= s->command->len; i++)
    if (memcmp(s->command->data + i, pattern.ptr, pattern.len) == 0) {
      /* The slice points into the config value, which each_listed frees: keep a copy. */
      char *copy = malloc(pattern.len);
      memcpy(copy, pattern.ptr, pattern.len);
      s->matched = (slice){copy, pattern.len};
      return 1;
    }
  return 0;
}

/* The rejection reason (owned by the caller): the `reason` config, or the default sentence. */
static void reason_for(slice pattern, answerer_string_t *out) {
  answerer_string_t key;
  answerer_string_set(&key, "reason");
  if (approval_plugin_host_config(&key, out)) return;
  const char *format = "the command contains \"%.*s\", which this deployment does not allow";
  int n = snprintf(NULL, 0, format, (int)pattern.len, pattern.ptr);
  char *text = malloc((size_t)n + 1);
  snprintf(text, (size_t)n + 1, format, (int)pattern.len, pattern.ptr);
  out->ptr = (uint8_t *)text;
  out->len = (size_t)n;
}

void exports_answerer_decide(answerer_request_t *request, answerer_decision_t *ret) {
  ret->tag = APPROVAL_PLUGIN_TYPES_DECISION_NEXT;
  if (request->call_id.is_some && request->arguments.is_some) {
    json_buf command;
    if (json_command((const char *)request->arguments.val.ptr, request->arguments.val.len,
                     &command)) {
      search s = {&command, {NULL, 0}};
      if (each_listed("patterns", contains, &s)) {
        answerer_string_t message;
        answerer_string_set(&message, "command matches a denied pattern: rejected");
        approval_plugin_host_log(APPROVAL_PLUGIN_HOST_LEVEL_INFO, &message);
        ret->tag = APPROVAL_PLUGIN_TYPES_DECISION_REJECT;
        ret->val.reject.is_some = true;
        reason_for(s.matched, &ret->val.reject.val);
        free((void *)s.matched.ptr);
      }
      free(command.data);
    }
  }
  answerer_request_free(request);
}
