/* allow-tools gate (C, plugin API 0.2): grants one call of any tool listed in its `tools` config
 * (comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything else. `tools` is
 * its only config key: any other is refused at load. */
#include "answerer.h"
#include "config_keys.h"
#include "list.h"

static const char *const KEYS[] = {"tools", NULL};

bool exports_answerer_validate_config(answerer_list_tuple2_string_string_t *config,
                                      answerer_string_t *err) {
  return only_keys(config, KEYS, "allow-tools", "\"tools\"", err);
}

static int same(slice entry, void *tool) {
  answerer_string_t *t = tool;
  return entry.len == t->len && memcmp(entry.ptr, t->ptr, entry.len) == 0;
}

void exports_answerer_decide(answerer_request_t *request, answerer_decision_t *ret) {
  int listed = each_listed("tools", same, &request->tool_name);
  answerer_request_free(request);
  ret->tag = listed ? APPROVAL_PLUGIN_TYPES_DECISION_ALLOW_ONCE : APPROVAL_PLUGIN_TYPES_DECISION_NEXT;
}
