/* allow-tools gate (C): grants one call of any tool listed in its `tools` config
 * (comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything else. */
#include "answerer.h"
#include "list.h"

static int same(slice entry, void *tool) {
  answerer_string_t *t = tool;
  return entry.len == t->len && memcmp(entry.ptr, t->ptr, entry.len) == 0;
}

answerer_decision_t exports_answerer_decide(answerer_request_t *request) {
  int listed = each_listed("tools", same, &request->tool_name);
  answerer_request_free(request);
  return listed ? APPROVAL_PLUGIN_TYPES_DECISION_ALLOW_ONCE : APPROVAL_PLUGIN_TYPES_DECISION_NEXT;
}
