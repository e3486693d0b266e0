/* deny-commands gate (C): rejects a call whose `command` argument contains one of the
 * configured `patterns` (comma-separated substrings). A call without a call id, recorded
 * arguments or a string `command` is not this gate's to judge: it says `next`. */
#include <stdio.h>

#include "answerer.h"
#include "json_command.h"
#include "list.h"

static int contains(slice pattern, void *command) {
  json_buf *c = command;
  if (pattern.len > c->len) return 0;
  for (size_t i = 0; i + pattern.len <= c->len; i++)
    if (memcmp(c->data + i, pattern.ptr, pattern.len) == 0) return 1;
  return 0;
}

answerer_decision_t exports_answerer_decide(answerer_request_t *request) {
  answerer_decision_t decision = APPROVAL_PLUGIN_TYPES_DECISION_NEXT;
  answerer_string_t arguments;
  if (request->call_id.is_some &&
      approval_plugin_host_call_arguments(&request->call_id.val, &arguments)) {
    json_buf command;
    if (json_command((const char *)arguments.ptr, arguments.len, &command)) {
      if (each_listed("patterns", contains, &command)) {
        answerer_string_t message;
        answerer_string_set(&message, "command matches a denied pattern: rejected");
        approval_plugin_host_log(APPROVAL_PLUGIN_HOST_LEVEL_INFO, &message);
        decision = APPROVAL_PLUGIN_TYPES_DECISION_REJECT;
      }
      free(command.data);
    }
    answerer_string_free(&arguments);
  }
  answerer_request_free(request);
  return decision;
}
